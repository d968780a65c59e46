"""Findings a report describes or measures instead of naming ("the pelvicalyceal system is
dilated", "the spleen measures 16.5 cm"): the vocabulary's descriptions and measurements."""

import json

import pytest

from medreco.data.reports.decomposition import RuleBasedDecomposer
from medreco.data.reports.ontology import Measurement, Ontology, measured_sizes
from medreco.data.reports.statement import MentionStatus
from medreco.errors import TextFileError


@pytest.fixture(scope="module")
def decomposer():
    return RuleBasedDecomposer()


@pytest.mark.parametrize(
    ("text", "modality", "expected"),
    [
        # a subject and its state, in either order, or named by a noun
        ("The left pelvicalyceal system and ureter are dilated.", "abdominal_ct", {"hydronephrosis": "positive"}),
        ("Dilated left renal pelvis.", "ultrasound", {"hydronephrosis": "positive"}),
        ("Enlargement of the spleen.", "abdominal_ct", {"splenomegaly": "positive", "spleen": "positive"}),
        (
            "The liver and spleen are enlarged.",
            "abdominal_ct",
            {"hepatomegaly": "positive", "splenomegaly": "positive"},
        ),
        ("Pancreas: atrophic, with the main duct dilated.", "abdominal_ct", {"pancreatic duct dilatation": "positive"}),
        ("The liver is diffusely low in attenuation.", "abdominal_ct", {"hepatic steatosis": "positive"}),
        (
            "Volume loss in the right hippocampus.",
            "brain_mri",
            {"cerebral atrophy": "positive", "hippocampus": "positive"},
        ),
        # negation and hedging apply to the state as to a name
        ("CBD not dilated.", "ultrasound", {"biliary dilatation": "negative"}),
        ("The heart is not enlarged.", "chest_xray", {"cardiomegaly": "negative"}),
        ("No enlargement of the spleen.", "abdominal_ct", {"splenomegaly": "negative"}),
        ("The gallbladder wall is not thickened.", "ultrasound", {"gallbladder wall thickening": "negative"}),
        ("Ventricles: not dilated.", "brain_mri", {"hydrocephalus": "negative"}),
        # a normal state rules the finding out, and reads the other way round when negated
        (
            "The portal vein is patent.",
            "abdominal_ct",
            {"portal vein thrombosis": "negative", "portal vein": "negative"},
        ),
        ("The portal vein is not patent.", "ultrasound", {"portal vein thrombosis": "positive"}),
        ("The deep veins are fully compressible.", "ultrasound", {"deep vein thrombosis": "negative"}),
        ("The ventricles are normal in size.", "brain_mri", {"hydrocephalus": "negative"}),
        ("Ventricles and sulci are normal in size for age.", "brain_mri", {"cerebral atrophy": "negative"}),
        (
            "The heart is normal in size and the pulmonary vasculature is not engorged.",
            "chest_xray",
            {"cardiomegaly": "negative"},
        ),
        # an organ surgically absent: the operation is there, the organ is not
        ("Gallbladder: Surgically absent.", "ultrasound", {"cholecystectomy": "positive", "gallbladder": "negative"}),
        ("Both hippocampi are small.", "brain_mri", {"hippocampal atrophy": "positive"}),
        # round 9 vocabulary
        ("Fluid surrounds the left testis.", "ultrasound", {"hydrocele": "positive"}),
        ("Right frontal haematoma with surrounding oedema.", "brain_mri", {"intracerebral hemorrhage": "positive"}),
        ("Enlarged subcarinal LN measuring 16 mm short axis.", "chest_ct", {"mediastinal lymphadenopathy": "positive"}),
        ("Increased flow within the left epididymis.", "ultrasound", {"hyperemia": "positive"}),
        ("No destructive bony lesion.", "chest_xray", {"bone lesion": "negative"}),
        ("Lucency under the right hemidiaphragm.", "chest_xray", {"pneumoperitoneum": "positive"}),
        ("The upper lobe veins are distended.", "chest_xray", {"pulmonary venous congestion": "positive"}),
        ("The optic nerve sheaths are of normal calibre.", "brain_mri", {"raised intracranial pressure": "negative"}),
        ("Both optic nerve sheaths are distended.", "brain_mri", {"raised intracranial pressure": "positive"}),
        ("RIGHT VENTRICLE: Not dilated.", "chest_ct", {"right ventricular dilatation": "negative"}),
        ("Pericardium not thickened.", "chest_ct", {"pericardial thickening": "negative"}),
        ("The aortic knuckle is unfolded.", "chest_xray", {"aortic unfolding": "positive"}),
        ("Crescentic extra-axial collection over the right convexity.", "brain_mri", {"subdural hematoma": "positive"}),
        ("Blood layers in the occipital horns.", "brain_mri", {"intraventricular hemorrhage": "positive"}),
        ("Air outlines the mediastinal structures.", "chest_ct", {"pneumomediastinum": "positive"}),
        ("Gas extends into the soft tissues of the neck.", "chest_xray", {"subcutaneous emphysema": "positive"}),
        ("Loss of grey-white matter differentiation in the right insula.", "brain_mri", {"infarct": "positive"}),
        ("Cholecystolithiasis without cholecystitis.", "abdominal_ct", {"cholelithiasis": "positive"}),
        ("Scattered sigmoid tics.", "abdominal_ct", {"diverticulosis": "positive"}),
        ("No interstitial fibrosis.", "chest_ct", {"pulmonary fibrosis": "negative"}),
        ("The abdominal aorta is of normal calibre.", "abdominal_ct", {"abdominal aorta": "negative"}),
        ("The spleen is of normal size.", "abdominal_ct", {"splenomegaly": "negative"}),
        (
            "Fluid tracks up the left lateral chest wall into the oblique fissure.",
            "chest_xray",
            {"pleural effusion": "positive"},
        ),
        (
            "Lucencies track through the soft tissues of the right chest wall.",
            "chest_xray",
            {"subcutaneous emphysema": "positive"},
        ),
        ("Air is seen within the mediastinum.", "chest_ct", {"pneumomediastinum": "positive"}),
        ("The lower lobe bronchi are dilated and fail to taper.", "chest_ct", {"bronchiectasis": "positive"}),
        ("Several calculi within a thin-walled GB.", "abdominal_ct", {"cholelithiasis": "positive"}),
        ("Sludge-filled gallbladder.", "ultrasound", {"biliary sludge": "positive"}),
        (
            "A 4 mm stone is lodged at the left vesicoureteric junction.",
            "abdominal_ct",
            {"ureteric calculus": "positive"},
        ),
        ("Fluid surrounds the liver and spleen.", "ultrasound", {"ascites": "positive"}),
        ("Positive sonographic Murphy's.", "ultrasound", {"sonographic murphy sign": "positive"}),
        ("The common duct is normal.", "ultrasound", {"bile duct dilatation": "negative"}),
        # another object's state is not the organ's
        ("The liver lesion is enlarged.", "abdominal_ct", {"hepatomegaly": "not mentioned"}),
        (
            "Enlarged thyroid nodule.",
            "ultrasound",
            {"thyroid enlargement": "not mentioned", "thyroid nodule": "positive"},
        ),
        ("Interval enlargement of the right thyroid nodule.", "ultrasound", {"thyroid enlargement": "not mentioned"}),
        # filled for the scan: a normal state, never the finding
        ("The bladder is adequately distended.", "ultrasound", {"bladder distension": "negative"}),
        # the name, when the sentence gives one, decides
        (
            "The right renal pelvic dilatation represents an extrarenal pelvis rather than hydronephrosis.",
            "ultrasound",
            {"hydronephrosis": "negative"},
        ),
        # sizes: above the limit the finding, up to the normal limit its absence, in between nothing
        (
            "The spleen measures 16.5 cm in craniocaudal length.",
            "abdominal_ct",
            {"splenomegaly": "positive", "spleen": "positive"},
        ),
        ("The spleen measures 11 cm.", "abdominal_ct", {"splenomegaly": "negative", "spleen": "negative"}),
        ("The spleen measures 12.5 cm.", "abdominal_ct", {"splenomegaly": "not mentioned"}),
        ("The ascending aorta measures 5.1 cm in maximal diameter.", "chest_ct", {"aortic aneurysm": "positive"}),
        ("The infrarenal aorta measures 5.8 cm.", "abdominal_ct", {"abdominal aortic aneurysm": "positive"}),
        ("CBD 4 mm.", "ultrasound", {"biliary dilatation": "negative"}),
        (
            "Subcarinal and right paratracheal lymph nodes measure up to 22 mm in short axis.",
            "chest_ct",
            {"mediastinal lymphadenopathy": "positive"},
        ),
        ("A subcarinal node of 15 x 8 mm.", "chest_ct", {"mediastinal lymphadenopathy": "negative"}),  # short axis 8 mm
        ("The spleen contains a cyst measuring 3 cm.", "abdominal_ct", {"splenomegaly": "not mentioned"}),
        # limits that hold in some sentences only: an endometrium's after the menopause
        (
            "The endometrium measures 18 mm in this postmenopausal woman.",
            "ultrasound",
            {"endometrial thickening": "positive", "endometrium": "positive"},
        ),
        (
            "Endometrial thickness 3 mm, appropriate for postmenopausal status.",
            "ultrasound",
            {"endometrial thickening": "negative"},
        ),
        ("The endometrium measures 12 mm.", "ultrasound", {"endometrial thickening": "not mentioned"}),
    ],
)
def test_described_findings(decomposer, text, modality, expected):
    for name, status in expected.items():
        entity = decomposer.ontology.find(name, modality)
        got = decomposer.decompose(text, modality).status(entity.id)
        assert got is MentionStatus(status), f"{name}: {got.value}"


def test_a_measurement_has_a_grey_zone_and_a_dimension():
    spleen = Measurement(("spleen",), abnormal_above=130.0, normal_up_to=120.0)
    assert spleen.verdict([165.0]) is True and spleen.verdict([110.0]) is False and spleen.verdict([125.0]) is None
    node = Measurement(("lymph node",), abnormal_above=10.0, normal_up_to=10.0, dimension="smallest")
    assert node.verdict(measured_sizes("15 x 8", "mm")) is False
    assert measured_sizes("1.5 x 1.2", "cm") == [15.0, 12.0]


def _extension(block: dict) -> dict:
    entity = {"id": "us/abnormal/ovarian-enlargement@ovaries", "level": "abnormal", "name": "Ovarian enlargement"}
    return {"families": {"US": {"modalities": ["ultrasound"], "entities": [{**entity, **block}]}}}


def test_users_add_descriptions_and_measurements(tmp_path):
    path = tmp_path / "extra.json"
    block = {
        "descriptions": [{"subjects": ["adnexa"], "states": ["bulky"], "normal_states": ["unremarkable"]}],
        "measurements": [{"subjects": ["ovarian volume"], "abnormal_above": "20 mm", "normal_up_to": "10 mm"}],
    }
    path.write_text(json.dumps(_extension(block)))
    reader = RuleBasedDecomposer(Ontology.load(path))
    finding = "us/abnormal/ovarian-enlargement@ovaries"
    assert reader.decompose("The left adnexa is bulky.", "ultrasound").status(finding) is MentionStatus.POSITIVE
    assert reader.decompose("The adnexa are unremarkable.", "ultrasound").status(finding) is MentionStatus.NEGATIVE
    assert reader.decompose("Ovarian volume 25 mm.", "ultrasound").status(finding) is MentionStatus.POSITIVE


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"descriptions": [{"subjects": ["adnexa"]}]}, "states or normal_states"),
        ({"measurements": [{"subjects": ["ovary"], "abnormal_above": "big", "normal_up_to": "1 cm"}]}, "a size"),
        ({"measurements": [{"subjects": ["ovary"], "abnormal_above": "1 cm", "normal_up_to": "2 cm"}]}, "normal_up_to"),
        (
            {"measurements": [{"subjects": ["ovary"], "abnormal_above": "1 cm", "normal_up_to": "1 cm", "unit": "in"}]},
            "unit is 'mm'",
        ),
        (
            {"measurements": [{"subjects": ["ratio"], "abnormal_above": "0.5", "normal_up_to": 0.5, "unit": "ratio"}]},
            "between 0 and 1",
        ),
    ],
)
def test_a_bad_description_names_the_file(tmp_path, block, problem):
    path = tmp_path / "extra.json"
    path.write_text(json.dumps(_extension(block)))
    with pytest.raises(TextFileError, match=problem) as error:
        Ontology.load(path)
    assert str(path) in str(error.value)
