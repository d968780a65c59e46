"""Report language on hand-written reports the decomposer was not built from.

tests/data/report_language/ holds eighteen sets of hand-written report excerpts with mention-status
labels (written here for this purpose, not copied from any dataset, each by a different writer):
`dev.jsonl` to `dev10.jsonl` are development sets (the rules and the vocabulary were tuned on them;
dev2 and dev3 were held-out sets, each scored once before it was folded into development; dev5 to
dev10 were written to the labelling guide in docs/mining.md); `test5.jsonl` was held out in round 8
and scored once, then its errors were read in round 9 and it was tuned on (development since);
`test.jsonl` to `test4.jsonl` and `test6.jsonl` to `test8.jsonl` are held out (never tuned on, their
errors never read; test8 was scored once, at the end of round 10). `test6_second_annotator.jsonl`
holds a second writer's statuses for test6's names. Four more sets hold whole reports (headings,
indication, findings and impression, 60 per set, 12 per family, written as an archive holds them rather
than to be tricky): `reports_dev.jsonl` and `reports_dev2.jsonl` for development (round 11),
`reports_test.jsonl` and `reports_test2.jsonl` held out (errors never read, scored at the end of round
11). See docs/report-language.md for how each set was used, and docs/mining.md, "How well it reads
real reports"."""

import json
from pathlib import Path

import pytest

from medreco.data.mining.scoring import read_labelled_reports, score_labelled_reports
from medreco.data.reports.decomposition import RuleBasedDecomposer
from medreco.data.reports.statement import MentionStatus
from medreco.errors import TextFileError

SETS = Path(__file__).parent / "report_language"
DEVELOPMENT = {
    "dev.jsonl": 240,
    "dev2.jsonl": 300,
    "dev3.jsonl": 300,
    "dev4.jsonl": 450,
    "dev5.jsonl": 398,
    "dev6.jsonl": 389,
    "dev7.jsonl": 389,
    "dev8.jsonl": 377,
    "dev9.jsonl": 370,
    "dev10.jsonl": 370,
    "test5.jsonl": 368,  # held out in round 8, tuned on in round 9
    "reports_dev.jsonl": 60,  # whole reports
    "reports_dev2.jsonl": 60,
}
HELD_OUT = {
    "test.jsonl": 380,
    "test2.jsonl": 380,
    "test3.jsonl": 380,
    "test4.jsonl": 369,
    "test6.jsonl": 376,
    "test7.jsonl": 381,
    "test8.jsonl": 371,
    "reports_test.jsonl": 60,  # whole reports
    "reports_test2.jsonl": 60,
}
FAMILIES = {"chest_xray", "chest_ct", "abdominal_ct", "brain_mri", "ultrasound"}


@pytest.fixture(scope="module")
def decomposer():
    return RuleBasedDecomposer()


def test_the_sets_are_large_and_cover_every_family():
    for name, minimum in {**DEVELOPMENT, **HELD_OUT}.items():
        rows = read_labelled_reports(SETS / name)
        assert len(rows) >= minimum
        assert {r["modality"] for r in rows} == FAMILIES
    development = {r["text"].lower() for name in DEVELOPMENT for r in read_labelled_reports(SETS / name)}
    for name in HELD_OUT:  # held out: no line of a development set
        assert not development & {r["text"].lower() for r in read_labelled_reports(SETS / name)}


@pytest.mark.parametrize(
    ("name", "accuracy", "coverage"),
    [
        ("dev.jsonl", 0.99, 0.98),
        ("dev2.jsonl", 0.99, 0.99),
        ("dev3.jsonl", 0.97, 0.99),
        ("dev4.jsonl", 0.975, 0.98),
        ("dev5.jsonl", 0.97, 0.955),
        ("dev6.jsonl", 0.975, 0.915),
        ("dev7.jsonl", 0.945, 0.96),
        ("dev8.jsonl", 0.96, 0.955),
        ("dev9.jsonl", 0.95, 0.965),
        ("dev10.jsonl", 0.95, 0.96),
        ("test5.jsonl", 0.93, 0.94),
        ("reports_dev.jsonl", 0.97, 0.92),
        ("reports_dev2.jsonl", 0.97, 0.915),
    ],
)
def test_development_sets_read_right(decomposer, name, accuracy, coverage):
    result = score_labelled_reports(decomposer, SETS / name)
    assert result["status_accuracy_resolved"] >= accuracy, result["errors"]
    assert result["vocabulary_coverage"] >= coverage


@pytest.mark.parametrize(
    ("name", "accuracy", "coverage"), [("reports_test.jsonl", 0.97, 0.91), ("reports_test2.jsonl", 0.96, 0.915)]
)
def test_whole_held_out_reports_read_at_the_target(decomposer, name, accuracy, coverage):
    """The issue's target, 95% on unseen real-style reports: two fresh writers' whole reports (60 each,
    12 per family, as an archive holds them), held out and scored at the end of round 11: 97.3% and
    96.5% of the statuses of entities the vocabulary resolves (pooled 96.9%, report-clustered 95%
    interval [95.8, 97.8]). This guards that figure; README and docs/mining.md give the numbers."""
    result = score_labelled_reports(decomposer, SETS / name)
    assert result["labels"] >= 590
    assert result["status_accuracy_resolved"] >= accuracy
    assert result["vocabulary_coverage"] >= coverage
    assert set(result["by_modality"]) == FAMILIES


@pytest.mark.parametrize(
    ("name", "accuracy", "coverage"),
    [
        ("test.jsonl", 0.955, 0.97),
        ("test2.jsonl", 0.94, 0.92),
        ("test3.jsonl", 0.93, 0.96),
        ("test4.jsonl", 0.91, 0.95),
        ("test6.jsonl", 0.915, 0.955),
        ("test7.jsonl", 0.92, 0.955),
        ("test8.jsonl", 0.90, 0.945),
    ],
)
def test_held_out_sets_are_scored_and_do_not_regress(decomposer, name, accuracy, coverage):
    """The target is 95%; the held-out sets are read at 96.2% (test), 94.4% (test2), 93.4% (test3),
    91.8% (test4), 92.2% (test6), 92.5% (test7) and 90.7% (test8, scored once) on the statuses of
    entities the vocabulary resolves (never tuned on): this guards against regression. README and
    docs/mining.md give the numbers."""
    result = score_labelled_reports(decomposer, SETS / name)
    assert result["labels"] >= 760
    assert result["status_accuracy_resolved"] >= accuracy
    assert result["vocabulary_coverage"] >= coverage
    assert set(result["by_modality"]) == FAMILIES


@pytest.mark.parametrize(
    ("text", "modality", "expected"),
    [
        # negation shared along a coordinated list, and stopping where a new description begins
        (
            "No focal airspace consolidation, pleural effusion, or pneumothorax.",
            "chest_xray",
            {"pneumothorax": "negative"},
        ),
        ("Neither pericardial nor pleural effusion.", "chest_ct", {"pericardial effusion": "negative"}),
        ("No pleural effusion, and small bilateral nodules are present.", "chest_ct", {"lung nodule": "positive"}),
        ("No effusion; however there is a new consolidation.", "chest_xray", {"consolidation": "positive"}),
        # normal limits, "otherwise", anatomy described plainly
        ("The heart is normal in size.", "chest_xray", {"cardiomegaly": "negative"}),
        ("The spleen measures 10.5 cm, within normal limits.", "abdominal_ct", {"splenomegaly": "negative"}),
        ("Left basilar atelectasis; the lungs are otherwise clear.", "chest_xray", {"atelectasis": "positive"}),
        ("The lungs are well expanded without consolidation.", "chest_xray", {"lungs": "negative"}),
        # differential lists, versus, "no X to suggest Y", "rather than", "denies"
        ("Differential diagnosis includes metastasis, glioma, or abscess.", "brain_mri", {"abscess": "uncertain"}),
        (
            "Left basilar opacity, atelectasis versus pneumonia.",
            "chest_xray",
            {"lung opacity": "positive", "atelectasis": "uncertain"},
        ),
        ("No focal consolidation to suggest pneumonia.", "chest_xray", {"pneumonia": "negative"}),
        (
            "Likely atelectasis rather than pneumonia.",
            "chest_xray",
            {"pneumonia": "negative", "atelectasis": "uncertain"},
        ),
        ("The patient denies trauma; no rib fracture.", "chest_xray", {"rib fracture": "negative"}),
        # pseudo-negation and post-position negation
        ("No change in the small left pleural effusion.", "chest_xray", {"pleural effusion": "positive"}),
        ("The previously seen pneumothorax is no longer seen.", "chest_xray", {"pneumothorax": "negative"}),
        ("The small cyst in the right thyroid lobe is no longer seen.", "ultrasound", {"thyroid nodule": "negative"}),
        ("Ascites: none.", "abdominal_ct", {"ascites": "negative"}),
        # a generic word resolved by the organ the sentence names, British spelling, plurals
        ("A 2 cm simple cyst in the upper pole of the left kidney.", "ultrasound", {"renal cyst": "positive"}),
        ("Liver is normal in size without focal lesion.", "abdominal_ct", {"liver lesion": "negative"}),
        (
            "Small subdural haematoma without midline shift.",
            "brain_mri",
            {"subdural hematoma": "positive", "midline shift": "negative"},
        ),
        # the subject of a differential was seen; its alternatives are uncertain (decimals included)
        (
            "Differential for the 2.5 cm cavitary right upper lobe nodule includes tuberculosis and lung cancer.",
            "chest_ct",
            {"lung nodule": "positive", "tuberculosis": "uncertain", "lung cancer": "uncertain"},
        ),
        # a structured line's heading: the organ it names is the context, and abnormal when the line says so
        ("Liver: Mildly steatotic. No focal lesion.", "abdominal_ct", {"liver lesion": "negative"}),
        ("Lungs: Clear, no nodules.", "chest_ct", {"lungs": "negative"}),
        ("Aorta: Ascending aorta measures 4.6 cm, aneurysmal.", "chest_ct", {"aorta": "positive"}),
        # "otherwise clear": the structure is normal but for the finding named
        (
            "Minor scarring at the left apex. The lungs are otherwise clear.",
            "chest_xray",
            {"lungs": "negative", "atelectasis": "not mentioned"},
        ),
        # a negation anywhere before "to suggest" in the clause denies what is suggested
        ("No loss of compressibility or intraluminal echoes to suggest DVT.", "ultrasound", {"dvt": "negative"}),
        # a finding described, then named with a hedge: uncertain
        (
            "Filling defects in the segmental arteries are suspicious for acute PE.",
            "chest_ct",
            {"pulmonary embolism": "uncertain"},
        ),
        # lexicon phrases (NegEx, ConText, CheXpert): hedged "consistent with", resolution, exclusion
        ("Findings may be compatible with pneumonia.", "chest_xray", {"pneumonia": "uncertain"}),
        ("The appearance is not consistent with pneumonia.", "chest_xray", {"pneumonia": "negative"}),
        ("Pulmonary edema has cleared since the prior examination.", "chest_xray", {"pulmonary edema": "negative"}),
        ("Partial resolution of the consolidation.", "chest_xray", {"consolidation": "positive"}),
        ("Pneumothorax excluded.", "chest_xray", {"pneumothorax": "negative"}),
        ("Rule out pneumonia.", "chest_xray", {"pneumonia": "uncertain"}),
        ("Patchy consolidation, favoured to represent pneumonia.", "chest_ct", {"pneumonia": "uncertain"}),
        ("Negative sonographic Murphy sign.", "ultrasound", {"sonographic murphy sign": "negative"}),
        ("CT without contrast demonstrates a small pneumothorax.", "chest_ct", {"pneumothorax": "positive"}),
        ("Considerations include clear cell renal cell carcinoma.", "abdominal_ct", {"renal mass": "uncertain"}),
        # a generic word names a finding only in its organ's context
        ("Findings consistent with infective colitis.", "abdominal_ct", {"pneumonia": "not mentioned"}),
        ("Tree-in-bud nodularity in the right lower lobe, likely infective.", "chest_ct", {"infection": "uncertain"}),
        # a structure named with a finding in its clause is as the finding is; a structured line's
        # negated words say nothing of its organ; "apart from X, the lungs are clear"
        ("Intimal flap in the descending thoracic aorta, Stanford type B.", "chest_ct", {"thoracic aorta": "positive"}),
        ("Bones: No aggressive osseous lesion.", "chest_ct", {"bones": "negative"}),
        ("Fourth ventricle: Mildly effaced, without hydrocephalus.", "brain_mri", {"ventricles": "positive"}),
        ("Bladder: Well distended, normal wall.", "ultrasound", {"bladder": "negative"}),
        (
            "Apart from a 4 mm perifissural nodule, the lungs are clear.",
            "chest_ct",
            {"lungs": "negative", "lung nodule": "positive"},
        ),
        (
            "Mediastinum: Normal contours. Hila: Prominent bilaterally, possibly lymphadenopathy.",
            "chest_xray",
            {"mediastinum": "negative"},
        ),
        (
            "The pancreas is diffusely enlarged with loss of its normal lobulation.",
            "abdominal_ct",
            {"pancreas": "positive"},
        ),
        ("The thoracic aorta is of normal calibre.", "chest_ct", {"aortic aneurysm": "negative"}),
        # alternatives: "A or B", "either A or B", "less likely", "the main considerations"; not under a negation
        (
            "Rounded lucency at the right apex, either a bulla or a loculated pneumothorax.",
            "chest_xray",
            {"bullae": "uncertain", "pneumothorax": "uncertain"},
        ),
        (
            "Cholelithiasis without gallbladder wall thickening or pericholecystic fluid.",
            "abdominal_ct",
            {"cholelithiasis": "positive"},
        ),
        (
            "Multiple small hepatic lesions, possibly cysts or haemangiomas.",
            "abdominal_ct",
            {"liver lesion": "positive"},
        ),
        (
            "Appearances favour an aspergilloma; a cavitating neoplasm is a less likely alternative.",
            "chest_ct",
            {"lung cancer": "uncertain"},
        ),
        (
            "Anterior mediastinal mass: thymoma or lymphoma are the main considerations.",
            "chest_ct",
            {"thymoma": "uncertain"},
        ),
        (
            "Reticulation, usual interstitial pneumonia pattern versus fibrotic NSIP.",
            "chest_ct",
            {"interstitial lung disease": "uncertain"},
        ),
        (
            "Clinical correlation with lipase is recommended to assess for pancreatitis.",
            "abdominal_ct",
            {"pancreatitis": "uncertain"},
        ),
        ("A small amount of pelvic free fluid is likely physiologic.", "abdominal_ct", {"free fluid": "positive"}),
        # where a negation stops: "leaving", parentheses, "and only", a comma before a new subject
        (
            "The previously seen contusion has resolved, leaving a small area of encephalomalacia.",
            "brain_mri",
            {"encephalomalacia": "positive"},
        ),
        (
            "Spiculated mass (without chest wall invasion) with enlarged hilar lymph nodes.",
            "chest_ct",
            {"lymphadenopathy": "positive"},
        ),
        (
            "No residual pneumothorax and only minimal basilar atelectasis.",
            "chest_xray",
            {"atelectasis": "positive", "pneumothorax": "negative"},
        ),
        (
            "While there is no focal consolidation, a subtle opacity at the right base could reflect early pneumonia.",
            "chest_xray",
            {"lung opacity": "positive", "consolidation": "negative"},
        ),
        # pseudo-negations of time, technique and response; removal and involution
        (
            "A 9 mm nodular opacity in the left mid lung, not seen previously, is new.",
            "chest_xray",
            {"lung nodule": "positive"},
        ),
        ("The renal cysts are not new and are unchanged.", "abdominal_ct", {"renal cyst": "positive"}),
        ("The consolidation does not appear to have resolved.", "chest_ct", {"consolidation": "positive"}),
        (
            "MRI brain without and with gadolinium: the meningioma is again seen.",
            "brain_mri",
            {"meningioma": "positive"},
        ),
        (
            "Renal ultrasound performed without Doppler: bilateral renal cysts.",
            "ultrasound",
            {"renal cyst": "positive"},
        ),
        (
            "A small pneumothorax has developed following chest tube removal.",
            "chest_xray",
            {"support devices": "negative", "pneumothorax": "positive"},
        ),
        ("The haemorrhagic cyst in the right ovary has involuted.", "ultrasound", {"hemorrhagic cyst": "negative"}),
        # round 5: a verb after a modifying phrase is about the subject, not the finding inside the phrase
        (
            "The oedema around the resected metastasis has resolved.",
            "brain_mri",
            {"vasogenic edema": "negative", "brain metastases": "positive"},
        ),
        # "has resolved" is the subject's; what follows it is not negated
        (
            "The left hydronephrosis has resolved following nephrostomy tube placement.",
            "ultrasound",
            {"hydronephrosis": "negative"},
        ),
        # a procedure after "following"/"after" and "s/p" start a new clause
        (
            "No pneumothorax after placement of a left chest tube.",
            "chest_xray",
            {"pneumothorax": "negative", "support devices": "positive"},
        ),
        # a lowercase sentence after a full stop is a new clause
        ("No focal consolidation. s/p CABG.", "chest_xray", {"coronary artery bypass graft": "positive"}),
        # "is otherwise normal" is the predicate, not a new clause
        ("The small bowel is otherwise normal in calibre.", "abdominal_ct", {"bowel obstruction": "negative"}),
        # after a negation, "and" before a grade or an article starts a new, positive item
        (
            "Cirrhotic liver, no portal vein thrombosis and moderate ascites.",
            "abdominal_ct",
            {"portal vein thrombosis": "negative", "ascites": "positive"},
        ),
        (
            "No pleural effusion and a 9 mm nodule in the right upper lobe.",
            "chest_ct",
            {"pleural effusion": "negative", "pulmonary nodule": "positive"},
        ),
        # ... but not in a list of possibilities
        (
            "Considerations include sarcoidosis and a lymphoma.",
            "chest_ct",
            {"sarcoidosis": "uncertain", "lymphoma": "uncertain"},
        ),
        # a new subject after "and": "not present, and the shunt ..."
        (
            "Hydrocephalus is not present, and the ventricular shunt terminates in the frontal horn.",
            "brain_mri",
            {"hydrocephalus": "negative", "ventricular shunt": "positive"},
        ),
        # "the main differentials are", "as alternatives", "correlation for"
        (
            "Hilar node enlargement; the main differentials are sarcoidosis and lymphoma.",
            "chest_ct",
            {"sarcoidosis": "uncertain", "lymphoma": "uncertain"},
        ),
        (
            "Ring-enhancing lesion; abscess is favoured, with glioblastoma and metastasis as alternatives.",
            "brain_mri",
            {"glioblastoma": "uncertain", "brain metastases": "uncertain"},
        ),
        # "X is favoured to represent Y": X was seen, Y is the possibility; "favour A over B": B is less likely
        (
            "The left basal opacity is favoured to represent atelectasis.",
            "chest_xray",
            {"lung opacity": "positive", "atelectasis": "uncertain"},
        ),
        ("We favour post-treatment change over tumour recurrence.", "brain_mri", {"tumor recurrence": "uncertain"}),
        # "no resolution of" is not a resolution; "has also cleared" is
        ("There is no resolution of the cavitating lesion.", "chest_ct", {"cavity": "positive"}),
        ("The pleural effusion has also cleared.", "chest_ct", {"pleural effusion": "negative"}),
        # "top-normal" is normal; "intact" negates a structure, not a device
        ("The common bile duct is top-normal at 6 mm.", "abdominal_ct", {"common bile duct": "negative"}),
        ("Intact sternotomy wires.", "chest_xray", {"sternotomy wires": "positive"}),
        # a later mention inside a location ("of the plaque") is not a hedged naming of the finding
        (
            "Calcified plaque at the carotid bulb with possible ulceration of the plaque surface.",
            "ultrasound",
            {"carotid plaque": "positive"},
        ),
        # round 6: a finding named as where a negated one would be is there
        ("No fat within the 12 mm nodule to suggest a hamartoma.", "chest_ct", {"pulmonary nodule": "positive"}),
        ("Pericardial and pleural effusions are both absent.", "chest_ct", {"pleural effusion": "negative"}),
        # "the differentials are", "remains possible", "X is probably a Y"
        (
            "Abscess, glioblastoma and metastasis are the differentials.",
            "brain_mri",
            {"glioblastoma": "uncertain", "brain metastases": "uncertain"},
        ),
        ("An atypical pneumonia remains possible.", "chest_ct", {"pneumonia": "uncertain"}),
        (
            "The 2 cm adrenal nodule is probably an adenoma.",
            "abdominal_ct",
            {"adrenal nodule": "positive", "adrenal adenoma": "uncertain"},
        ),
        # "lungs clear apart from ...", "the remaining lung is clear": normal but for what is named
        ("Lungs clear apart from a calcified granuloma.", "chest_xray", {"lungs": "negative"}),
        ("Right lower lobe nodule; the remaining lungs are clear.", "chest_ct", {"lungs": "negative"}),
        # "stable" after a comma starts a new item; "is not simple" describes, it does not negate
        ("No residual enhancement, stable mild vasogenic oedema.", "brain_mri", {"vasogenic edema": "positive"}),
        ("The left ovarian cyst is not simple, with thin septations.", "ultrasound", {"ovarian cyst": "positive"}),
        # the reference of a comparison is not abnormal
        (
            "Hepatic steatosis, the liver lower in attenuation than the spleen.",
            "abdominal_ct",
            {"liver": "positive", "spleen": "negative"},
        ),
        # round 7: after a negated item, "and" before a mention with a verb of its own starts a new clause
        (
            "There is no free gas and haemoperitoneum is tracking around the spleen.",
            "abdominal_ct",
            {"pneumoperitoneum": "negative", "haemoperitoneum": "positive"},
        ),
        ("No effusion or pneumothorax is seen.", "chest_xray", {"pneumothorax": "negative"}),
        # a spaced dash ends a clause; "X favoured"; a removal right after a name; "returned to normal"
        (
            "Adnexal mass with a fat-fluid level and no flow - dermoid favoured.",
            "ultrasound",
            {"dermoid cyst": "uncertain"},
        ),
        (
            "Post left frontal craniotomy and meningioma resection.",
            "brain_mri",
            {"craniotomy": "positive", "meningioma": "negative"},
        ),
        ("The resection cavity is unchanged.", "brain_mri", {"resection cavity": "positive"}),
        (
            "The mediastinal lymph nodes described previously have returned to normal size.",
            "chest_ct",
            {"mediastinal lymphadenopathy": "negative"},
        ),
        # a list of alternatives may hold words the vocabulary lacks
        (
            "Thickened gallbladder wall, no stones - hepatitis, hypoalbuminaemia or acalculous cholecystitis.",
            "ultrasound",
            {"acalculous cholecystitis": "uncertain"},
        ),
        # a finding where a negated one would be is there, however far the negation; a modifier's mention
        (
            "There is no enhancing component to suggest malignancy within the 4 cm left renal cyst.",
            "abdominal_ct",
            {"renal cyst": "positive"},
        ),
        (
            "The perihepatic collection seen after cholecystectomy has completely resolved.",
            "ultrasound",
            {"cholecystectomy": "positive"},
        ),
        # terse dictation: a state said of a subject after a negated finding and a comma is its own clause,
        # and "clear," is no negation of the next structure
        (
            "Lungs without consolidation, mediastinum widened to 9 cm.",
            "chest_xray",
            {"consolidation": "negative", "mediastinal widening": "positive", "lungs": "negative"},
        ),
        (
            "No gallstones, CBD dilated to 9 mm.",
            "ultrasound",
            {"gallstones": "negative", "biliary dilatation": "positive"},
        ),
        ("No gallstones, CBD not dilated.", "ultrasound", {"biliary dilatation": "negative"}),
        ("No ascites, spleen enlarged.", "abdominal_ct", {"ascites": "negative", "splenomegaly": "positive"}),
        ("Lungs clear, heart enlarged.", "chest_xray", {"lungs": "negative", "cardiomegaly": "positive"}),
        ("Neither the liver nor the spleen is enlarged.", "abdominal_ct", {"splenomegaly": "negative"}),
        ("No intracranial mass, midline shift or hydrocephalus.", "brain_mri", {"midline shift": "negative"}),
        # hedges after a mention: that one alone ("being most likely"), or the pair ("cannot be distinguished");
        # "seen with" says what is there unless it "can be" seen with it; "A or" a phrase the vocabulary lacks
        (
            "Perilymphatic nodules and hilar adenopathy, sarcoidosis being most likely.",
            "chest_ct",
            {"sarcoidosis": "uncertain", "hilar lymphadenopathy": "positive"},
        ),
        (
            "Nodular pleural thickening; mesothelioma and pleural metastases cannot be distinguished on imaging.",
            "chest_ct",
            {"mesothelioma": "uncertain", "pleural thickening": "positive"},
        ),
        ("Superimposed infection is difficult to exclude.", "chest_xray", {"pneumonia": "uncertain"}),
        ("Emphysema is seen with apical bullae.", "chest_ct", {"bullae": "positive"}),
        ("These appearances can be seen with sarcoidosis.", "chest_ct", {"sarcoidosis": "uncertain"}),
        (
            "The right testis is enlarged and hypoechoic; orchitis or an infiltrative process.",
            "ultrasound",
            {"orchitis": "uncertain"},
        ),
        # a heading is not its own line's subject
        (
            "Heart and great vessels: Normal heart size. Aneurysmal descending thoracic aorta measuring 4.6 cm.",
            "chest_ct",
            {"cardiomegaly": "negative"},
        ),
        # round 9: a size the report calls normal; a ratio read by its value; recanalisation resolves
        (
            "CBD measures 9 mm, within expected limits post cholecystectomy.",
            "abdominal_ct",
            {"common bile duct dilatation": "negative"},
        ),
        ("Common duct 8 mm, normal for age.", "ultrasound", {"common bile duct dilatation": "negative"}),
        ("CTR is 0.44.", "chest_xray", {"cardiomegaly": "negative"}),
        ("The cardiothoracic ratio is less than 0.5.", "chest_xray", {"cardiomegaly": "negative"}),
        ("The cardiothoracic ratio is greater than 0.5.", "chest_xray", {"cardiomegaly": "positive"}),
        ("Cardiothoracic ratio of 58%.", "chest_xray", {"cardiomegaly": "positive"}),
        ("The cardiothoracic ratio is increased.", "chest_xray", {"cardiomegaly": "positive"}),
        ("The right sigmoid sinus thrombosis has recanalised.", "brain_mri", {"venous sinus thrombosis": "negative"}),
        # the likeliest possibility is still one; "X is likely a Y" leaves X seen; a density that could be a
        # nipple shadow may not be there
        ("Echogenic 1.2 cm liver lesion, haemangioma most likely.", "ultrasound", {"hepatic hemangioma": "uncertain"}),
        (
            "Right basal opacity, most likely pneumonia.",
            "chest_xray",
            {"opacity": "positive", "pneumonia": "uncertain"},
        ),
        (
            "The 5 mm subpleural nodule is likely an intrapulmonary lymph node.",
            "chest_ct",
            {"pulmonary nodule": "positive"},
        ),
        (
            "A 1 cm nodule over the right fifth rib could be a nipple shadow.",
            "chest_xray",
            {"pulmonary nodule": "uncertain"},
        ),
        # "is absent" is a predicate, not a negation of what it suggests; a location after "to suggest Y"
        (
            "The left ICA flow void is absent, suggesting occlusion or dissection.",
            "brain_mri",
            {"carotid artery dissection": "uncertain"},
        ),
        (
            "No cystic change or calcification to suggest malignancy in this 2 cm thyroid nodule.",
            "ultrasound",
            {"thyroid nodule": "positive", "thyroid cancer": "negative"},
        ),
        # a measure after a finding and a comma is its structure's; an example in brackets keeps the hedge
        ("Aorta: mural calcified plaque, normal calibre.", "chest_ct", {"aortic atherosclerosis": "positive"}),
        ("Heart size, normal.", "chest_xray", {"cardiomegaly": "negative"}),
        (
            "Perihilar fullness, which could represent adenopathy (e.g. lymphoma) or vascular prominence.",
            "chest_xray",
            {"lymphoma": "uncertain"},
        ),
        ("Small left effusion (unchanged). No pneumothorax.", "chest_xray", {"pleural effusion": "positive"}),
        # a negated finding named in a list before "to suggest Y in this Z": Z is there; organ context for "mass"
        (
            "No microcalcification or taller-than-wide shape to suggest malignancy in this 1.4 cm thyroid nodule.",
            "ultrasound",
            {"thyroid nodule": "positive"},
        ),
        (
            "The geographic hypoechoic area near the gallbladder is focal fatty sparing rather than a mass.",
            "ultrasound",
            {"liver mass": "negative"},
        ),
        # round 10: a break's look-ahead may reach into the mention; the list walk stops at a preposition
        # and does not give a singular verdict across a bare comma; "apart from X, both ... are normal"
        (
            "Resolution of the left hydronephrosis after ureteric stent placement.",
            "abdominal_ct",
            {"ureteric stent": "positive", "hydronephrosis": "negative"},
        ),
        (
            "Post CABG with intact sternotomy wires, cardiac size is normal.",
            "chest_xray",
            {"sternotomy wires": "positive", "cardiomegaly": "negative"},
        ),
        ("Effusion, pneumothorax and consolidation are absent.", "chest_xray", {"pneumothorax": "negative"}),
        ("Effusion or pneumothorax is not seen.", "chest_xray", {"pleural effusion": "negative"}),
        (
            "Apart from a small left epididymal head cyst, both testes and epididymides are normal.",
            "ultrasound",
            {"spermatocele": "positive"},
        ),
        ("Spleen 11.5 cm, normal size.", "ultrasound", {"splenomegaly": "negative"}),
        (
            "Tonsillar herniation has resolved following suboccipital decompression.",
            "brain_mri",
            {"tonsillar herniation": "negative"},
        ),
        ("No collection after the recent cholecystectomy.", "ultrasound", {"cholecystectomy": "positive"}),
        (
            "The perihepatic collection seen after cholecystectomy has completely resolved.",
            "ultrasound",
            {"cholecystectomy": "positive"},
        ),
        # contrast filling a vessel is no lung opacity
        (
            "CT pulmonary angiogram: adequate opacification of the pulmonary arteries with no filling defect.",
            "chest_ct",
            {"lung opacity": "not mentioned", "pulmonary embolism": "negative"},
        ),
        ("Patchy opacification of the right lower lobe.", "chest_ct", {"lung opacity": "positive"}),
        # "polyp" is the gallbladder's or the endometrium's by context
        ("Thickened endometrium; polyp or hyperplasia.", "ultrasound", {"endometrial polyp": "uncertain"}),
        ("No gallstones; a 5 mm non-mobile polyp on the fundal wall.", "ultrasound", {"gallbladder polyp": "positive"}),
        # a coordination shares a modifier or a head between two names
        (
            "No pericardial effusion or thickening was detected.",
            "chest_ct",
            {"pericardial effusion": "negative", "pericardial thickening": "negative"},
        ),
        ("Small pericardial effusion and thickening.", "chest_ct", {"pericardial thickening": "positive"}),
        ("The cardiac and mediastinal silhouettes are unremarkable.", "chest_xray", {"heart": "negative"}),
        ("The cardiac and mediastinal silhouettes are enlarged.", "chest_xray", {"heart": "positive"}),
        # translated reports join two findings with a hyphen
        (
            "Pericardial effusion-thickening was not observed.",
            "chest_ct",
            {"pericardial effusion": "negative", "pericardial thickening": "negative"},
        ),
        ("No lytic-destructive lesions were detected in the bone structures.", "chest_ct", {"bone lesion": "negative"}),
        # contrast filling the arteries says nothing abnormal
        ("Adequate opacification.", "chest_ct", {"lung opacity": "not mentioned"}),
        (
            "Good opacification of the pulmonary arterial tree to subsegmental level.",
            "chest_ct",
            {"main pulmonary artery": "negative", "lungs": "not mentioned"},
        ),
        # a structure that is the reference of a comparison is not abnormal
        (
            "Diffuse hypoattenuation of the liver relative to the spleen, in keeping with hepatic steatosis.",
            "abdominal_ct",
            {"spleen": "negative", "liver": "positive"},
        ),
        # what a finding is out of proportion to is there
        (
            "No hydrocephalus out of proportion to the atrophy.",
            "brain_mri",
            {"hydrocephalus": "negative", "cerebral atrophy": "positive"},
        ),
        # a stone that has passed is gone
        (
            "Interval passage of the previously seen right renal calculus.",
            "abdominal_ct",
            {"renal calculi": "negative"},
        ),
        # nodes counted and none enlarged (CT-RATE style)
        (
            "Several subcentimetre lymph nodes are seen in the prevascular and lower paratracheal stations, "
            "none of pathological size.",
            "chest_ct",
            {"lymphadenopathy": "negative"},
        ),
        (
            "No lymph node in pathological size and appearance was detected in the mediastinum and at both "
            "hilar levels.",
            "chest_ct",
            {"lymphadenopathy": "negative"},
        ),
        ("Mediastinal lymph nodes of pathological size are seen.", "chest_ct", {"lymphadenopathy": "positive"}),
        # bare "lymphadenopathy" is the region's: the abdomen's on an abdominal CT, the chest's on a chest CT
        (
            "No lymphadenopathy.",
            "abdominal_ct",
            {"lymphadenopathy": "negative", "abdominal lymphadenopathy": "negative"},
        ),
        ("Lymph nodes: No pathologically enlarged nodes.", "abdominal_ct", {"lymphadenopathy": "negative"}),
        ("Bulky lymphadenopathy.", "chest_ct", {"mediastinal lymphadenopathy": "positive"}),
        # a heading's finding of no structure is its first structure's
        (
            "Gallbladder and bile ducts: There are 3 calcified gallstones, the largest 15 mm.",
            "abdominal_ct",
            {"gallbladder": "positive", "bile ducts": "not mentioned"},
        ),
        (
            "Gallbladder and bile ducts: Unremarkable.",
            "abdominal_ct",
            {"gallbladder": "negative", "bile ducts": "negative"},
        ),
        # a gallbladder well distended for the scan is normal
        (
            "Gallbladder is well distended with no stones, wall thickening or pericholecystic fluid.",
            "ultrasound",
            {"gallbladder": "negative", "gallbladder distension": "negative"},
        ),
        ("The gallbladder is distended.", "ultrasound", {"gallbladder distension": "positive"}),
        # a structure named to place something else, or poorly seen, is a landmark: not described
        ("Focal fatty sparing adjacent to the gallbladder fossa.", "ultrasound", {"gallbladder": "not mentioned"}),
        (
            "Increased echogenicity with poor visualization of the diaphragm and portal vein walls, in keeping "
            "with steatosis.",
            "ultrasound",
            {"portal vein": "not mentioned", "hepatic steatosis": "positive"},
        ),
        # ... but not one the words between call abnormal, nor one poorly seen
        ("Fluid collection adjacent to the thickened gallbladder.", "ultrasound", {"gallbladder": "positive"}),
        ("Poor visualisation of the pancreas due to bowel gas.", "abdominal_ct", {"pancreas": "not mentioned"}),
        # "passage of" removes a calculus only when it says the stone has gone
        (
            "Slow passage of contrast through the small bowel obstruction.",
            "abdominal_ct",
            {"bowel obstruction": "positive"},
        ),
        # "ischaemia" needs the bowel named to be the bowel's
        ("Ischemic changes in the kidney.", "abdominal_ct", {"bowel ischemia": "not mentioned"}),
        # organs offered as alternatives stay alternatives
        ("Liver or spleen lesion.", "abdominal_ct", {"liver": "uncertain"}),
        # a corpus luteum is physiology, not a cyst
        ("Both ovaries are normal; a corpus luteum is seen in the right ovary.", "ultrasound", {"ovaries": "negative"}),
        ("Haemorrhagic corpus luteum in the right ovary.", "ultrasound", {"ovaries": "positive"}),
        # a heading naming two structures gives each only its own findings
        (
            "Lungs/airways: Peripheral wedge-shaped opacity in the right lower lobe, likely pulmonary infarction.",
            "chest_ct",
            {"airways": "not mentioned", "lungs": "positive"},
        ),
        (
            "Heart and pericardium: Small pericardial effusion.",
            "chest_ct",
            {"heart": "not mentioned", "pericardium": "positive"},
        ),
        ("Lungs/airways: Clear.", "chest_ct", {"airways": "negative", "lungs": "negative"}),
        # places listed with "or" are no alternatives
        ("No obstructive lesion was observed in the trachea or main bronchi.", "chest_ct", {"trachea": "negative"}),
        ("No CT correlate for the opacity described on the radiograph.", "chest_ct", {"lung opacity": "negative"}),
        (
            "Dilated pulmonary trunk, pulmonary hypertension possible.",
            "chest_ct",
            {"pulmonary hypertension": "uncertain"},
        ),
        # a name restated in parentheses keeps the status the parenthesis would cut off
        (
            "Findings may represent treatment-related change (pseudoprogression) versus tumor progression.",
            "brain_mri",
            {"pseudoprogression": "uncertain"},
        ),
        (
            "Enlargement of the lateral and third ventricles with a normal fourth ventricle "
            "(obstructive hydrocephalus).",
            "brain_mri",
            {"hydrocephalus": "positive"},
        ),
        # the examination's name is every sentence's context
        ("RENAL ULTRASOUND\n\nFINDINGS: No hydronephrosis. No calculi.", "ultrasound", {"renal calculi": "negative"}),
        (
            "US THYROID\nFindings: 2.1 cm TR5 nodule in the left lobe.\nImpression: Highly suspicious for malignancy.",
            "ultrasound",
            {"thyroid malignancy": "uncertain"},
        ),
        # a "no" heading a list negates it all, though its first item is a pseudo-trigger
        ("No interval growth or new lesion.", "brain_mri", {"new lesion": "negative"}),
        ("No significant change. New lesion in the left frontal lobe.", "brain_mri", {"new lesion": "positive"}),
        # two states joined in one predicate
        ("The aorta is tortuous and calcified.", "chest_xray", {"aortic calcification": "positive"}),
        (
            "Small bowel obstruction. No CT signs of bowel ischemia or perforation.",
            "abdominal_ct",
            {"bowel ischemia": "negative"},
        ),
        ("Diverticulitis with a contained micro-perforation.", "abdominal_ct", {"perforation": "positive"}),
    ],
)
def test_scope_rules(decomposer, text, modality, expected):
    for name, status in expected.items():
        entity = decomposer.ontology.find(name, modality)
        assert decomposer.decompose(text, modality, [entity]).status(entity.id) is MentionStatus(status), name


def test_a_second_writer_gives_the_same_statuses_to_the_same_names():
    """Status labelling is not where the reader loses: a second writer, given test6's excerpts and the
    first writer's names (not their statuses), chose the same status for 824 of 826 (99.8%)."""
    first = {r["id"]: r["labels"] for r in read_labelled_reports(SETS / "test6.jsonl")}
    second = [json.loads(line) for line in (SETS / "test6_second_annotator.jsonl").read_text().splitlines()]
    assert [r["id"] for r in second] == list(first)
    pairs = [(status, first[r["id"]][name]) for r in second for name, status in r["labels"].items()]
    assert len(pairs) == sum(len(labels) for labels in first.values())
    assert sum(a == b for a, b in pairs) / len(pairs) >= 0.995


def test_labels_naming_one_entity_are_scored_once_or_set_aside(decomposer, tmp_path):
    """A reader gives each vocabulary entity one status: two labels naming the kidneys are one score
    when they agree, and none (a listed conflict) when they do not."""
    path = tmp_path / "labels.jsonl"
    rows = [
        {
            "modality": "ultrasound",
            "text": "Both kidneys are normal.",
            "labels": {"right kidney": "negative", "left kidney": "negative"},
        },
        {
            "modality": "ultrasound",
            "text": "Right kidney: normal. Left kidney: 2 cm simple cyst.",
            "labels": {"right kidney": "negative", "left kidney": "positive", "renal cyst": "positive"},
        },
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows))
    result = score_labelled_reports(decomposer, path)
    assert result["labels"] == 2 and result["labels_sharing_an_entity"] == 4
    assert result["conflicts"] == [
        {"id": 2, "labels": {"right kidney": "negative", "left kidney": "positive"}, "got": "positive"}
    ]
    assert result["status_accuracy"] == 1.0


def test_a_bad_labelled_file_names_the_line(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"modality": "chest_xray", "text": "No effusion.", "labels": {"effusion": "absent"}}))
    with pytest.raises(TextFileError, match="line 1: statuses must be one of"):
        read_labelled_reports(path)


def test_score_reports_command_gives_the_python_result(decomposer, capsys):
    from medreco.cli import main

    assert main(["score-reports", str(SETS / "dev.jsonl"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {"decomposer": "rule", **score_labelled_reports(decomposer, SETS / "dev.jsonl")}
    assert main(["score-reports", str(SETS / "dev.jsonl"), "--errors", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("rule decomposer, 480 statuses: status accuracy")
    assert sum(line.startswith("  dev-") for line in printed) == 2 and "more errors" in printed[-1]


def test_a_name_only_one_entity_uses_in_context_resolves_to_it(decomposer):
    pneumonia = decomposer.ontology.find("pneumonia", "chest_ct")
    assert decomposer.ontology.find("infection", "chest_ct") is pneumonia  # contextual, one entity
    with pytest.raises(KeyError):
        decomposer.ontology.find("cyst", "ultrasound")  # contextual in several organs' findings
