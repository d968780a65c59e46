import pytest

from medreco.data.mining.scoring import score_decomposition
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.data.reports.decomposition import RuleBasedDecomposer
from medreco.data.reports.sections import section_name, split_sections
from medreco.data.reports.statement import EmptyReportError, MentionStatus

P, N, U = MentionStatus.POSITIVE, MentionStatus.NEGATIVE, MentionStatus.UNCERTAIN


@pytest.fixture(scope="module")
def decomposer():
    return RuleBasedDecomposer()


@pytest.mark.parametrize(
    ("sentence", "term", "expected"),
    [
        ("No new effusion.", "pleural effusion", N),
        ("The effusion has resolved.", "pleural effusion", N),
        ("Cannot exclude pneumonia.", "pneumonia", U),
        ("Pneumonia cannot be excluded.", "pneumonia", U),
        ("Heart size is normal.", "cardiac chamber enlargement", N),
        ("The cardiac silhouette is within normal limits.", "cardiac chamber enlargement", N),
        ("The heart is moderately enlarged.", "cardiac chamber enlargement", P),
        ("Small left pleural effusion, not significantly changed.", "pleural effusion", P),
        ("Stable right effusion, no significant change.", "pleural effusion", P),
        ("No focal consolidation, effusion, or pneumothorax.", "pleural effusion", N),
        ("No focal consolidation, effusion, or pneumothorax.", "lung consolidation", N),
        ("There is no consolidation, but a small effusion is present.", "pleural effusion", P),
        ("There is no consolidation, but a small effusion is present.", "lung consolidation", N),
        ("Patchy opacity at the left base may represent atelectasis.", "atelectasis", U),
        ("Interval resolution of the right upper lobe nodule.", "solitary pulmonary nodule and mass", N),
        ("Mediastinal lymph nodes are not enlarged.", "lymph node enlargement in the mediastinum", N),
        ("Findings suggestive of early pneumonia in the right lower lobe.", "pneumonia", U),
        ("A 9 mm spiculated nodule in the left upper lobe is new.", "solitary pulmonary nodule and mass", P),
    ],
)
def test_negation_and_uncertainty(decomposer, sentence, term, expected):
    result = decomposer.decompose(sentence, "chest_xray")
    entity = decomposer.ontology.find(term, "chest_xray")
    assert result.status(entity.id) is expected, result.mentioned()


def test_entity_text_sections_and_anatomy(decomposer):
    report = (
        "INDICATION: History of pneumonia.\n\nFINDINGS: Moderate left pleural effusion. Heart size is normal. "
        "The lungs are otherwise clear.\n\nIMPRESSION: Moderate left pleural effusion."
    )
    result = decomposer.decompose(report, "chest_xray")
    pneumonia = decomposer.ontology.find("pneumonia", "chest_xray")
    assert result.status(pneumonia.id) is MentionStatus.NOT_MENTIONED  # the indication is not a finding
    effusion = result.statements[decomposer.ontology.find("pleural effusion", "chest_xray").id]
    assert effusion.status is P and effusion.text == "Moderate left pleural effusion."
    pleura = decomposer.ontology.find("pleura", "chest_xray")
    assert result.status(pleura.id) is P  # the finding informs its anatomy
    assert set(split_sections(report)) == {"preamble", "indication", "findings", "impression"}


@pytest.mark.parametrize(
    "report, modality, term, expected",
    [
        # only a history heading: the findings after its first sentence are read, the history is not
        (
            "History: chest pain; patient denies fever. No pleural effusion or pneumothorax.",
            "chest_xray",
            "pneumothorax",
            MentionStatus.NEGATIVE,
        ),
        ("Indication: ?pneumonia\nComparison: none\nRight lower lobe consolidation.", "chest_xray", "consolidation", P),
        (
            "Indication: ?pneumonia\nComparison: none\nRight lower lobe consolidation.",
            "chest_xray",
            "pneumonia",
            MentionStatus.NOT_MENTIONED,
        ),
        (
            "Clinical information: known hydrocephalus. Technique: axial T2. No hydrocephalus.",
            "brain_mri",
            "hydrocephalus",
            MentionStatus.NEGATIVE,
        ),
    ],
)
def test_a_report_without_a_findings_heading_is_read_after_its_history(decomposer, report, modality, term, expected):
    result = decomposer.decompose(report, modality)
    assert result.status(decomposer.ontology.find(term, modality).id) is expected, result.mentioned()


UK_CHEST_FILM = (
    "CXR PA\n\nClinical details: Productive cough, fever. ?Consolidation.\n\nReport: Small left pleural effusion. "
    "No pneumothorax. Heart size normal.\n\nOpinion: Small left effusion."
)
ORGAN_LINES = (
    "US ABDOMEN\nClinical: RUQ pain.\nLiver: Normal size and echotexture.\nGallbladder: Multiple mobile gallstones. "
    "No wall thickening.\nComment: Cholelithiasis without cholecystitis."
)
UNCOLONED_HEADINGS = (
    "INDICATION\n? PE\n\nFINDINGS\nNo filling defect to suggest pulmonary embolism.\n\nIMPRESSION\nNo PE."
)


@pytest.mark.parametrize(
    "report, modality, term, expected",
    [
        # departments' other words for the sections: the request is not read, the report and opinion are
        (UK_CHEST_FILM, "chest_xray", "consolidation", MentionStatus.NOT_MENTIONED),
        (UK_CHEST_FILM, "chest_xray", "pleural effusion", P),
        (UK_CHEST_FILM, "chest_xray", "pneumothorax", MentionStatus.NEGATIVE),
        # organ lines under no findings heading, in a report with an impression, are read
        (ORGAN_LINES, "ultrasound", "gallbladder wall thickening", MentionStatus.NEGATIVE),
        (ORGAN_LINES, "ultrasound", "gallstones", P),
        (ORGAN_LINES, "ultrasound", "liver", MentionStatus.NEGATIVE),
        # headings in capitals on a line of their own
        (UNCOLONED_HEADINGS, "chest_ct", "pulmonary embolism", MentionStatus.NEGATIVE),
    ],
)
def test_every_department_s_headings_are_read(decomposer, report, modality, term, expected):
    result = decomposer.decompose(report, modality)
    assert result.status(decomposer.ontology.find(term, modality).id) is expected, result.mentioned()


@pytest.mark.parametrize(
    "report, modality, term, expected",
    [
        # two headings of one section stay apart: a negation does not run into the next one
        ("IMPRESSION: No pneumothorax\nCOMMENT: Pleural effusion", "chest_xray", "pleural effusion", P),
        ("FINDINGS: No pneumothorax\nREPORT: Large pleural effusion", "chest_xray", "pleural effusion", P),
        # a request's own lines, with or without a heading, are not findings
        (
            "INDICATION:\nCough.\n?pneumonia, previous pleural effusion.\nIMPRESSION: No pneumothorax.",
            "chest_xray",
            "pleural effusion",
            MentionStatus.NOT_MENTIONED,
        ),
        (
            "CT CHEST\nHistory of breast cancer, known pleural effusion.\nIMPRESSION: No pneumothorax.",
            "chest_ct",
            "pleural effusion",
            MentionStatus.NOT_MENTIONED,
        ),
        # findings written before the impression, under no heading, are read
        (
            "The lungs are clear. No effusion.\nImpression: Normal chest.",
            "chest_xray",
            "pleural effusion",
            MentionStatus.NEGATIVE,
        ),
        # a broad word is a heading only with its colon; "Diagnosis" is none
        ("Pleural effusion is present.\nSummary\nsmall.", "chest_xray", "pleural effusion", P),
        ("Diagnosis: pneumonia\nFindings: clear lungs.", "chest_xray", "pneumonia", MentionStatus.NOT_MENTIONED),
        # Windows line endings
        ("FINDINGS:\r\nNo pneumothorax.\r\nIMPRESSION\r\nPleural effusion.", "chest_xray", "pleural effusion", P),
    ],
)
def test_sections_are_kept_apart_and_requests_are_not_read(decomposer, report, modality, term, expected):
    result = decomposer.decompose(report, modality)
    assert result.status(decomposer.ontology.find(term, modality).id) is expected, result.mentioned()


def test_a_statement_keeps_the_report_s_words(decomposer):
    """A hyphenated list is read as a list, and the statement quotes the report as written."""
    result = decomposer.decompose("Pericardial effusion-thickening was not observed.", "chest_ct")
    effusion = result.statements[decomposer.ontology.find("pericardial effusion", "chest_ct").id]
    assert effusion.status is MentionStatus.NEGATIVE
    assert effusion.sentences == ["Pericardial effusion-thickening was not observed."]


def test_section_names():
    assert split_sections(UK_CHEST_FILM).keys() == {"preamble", "indication", "findings", "impression"}
    assert split_sections(UNCOLONED_HEADINGS).keys() == {"preamble", "indication", "findings", "impression"}
    assert section_name("Clinical details") == "indication" and section_name("OPINION") == "impression"
    # a line that only begins with a heading's word is no heading
    assert "findings" not in split_sections("Findings are stable since the prior study.")
    with pytest.raises(ValueError, match="not a section heading"):
        section_name("Liver")


def test_empty_report(decomposer):
    with pytest.raises(EmptyReportError):
        decomposer.decompose("   ", "chest_ct")


def test_status_accuracy_on_the_synthetic_cohort(decomposer, tmp_path):
    generate_cohort(PhantomConfig(num_patients=15, size="tiny", seed=11), tmp_path, progress=False)
    scores = score_decomposition(decomposer, tmp_path)
    assert scores["pairs"] > 300
    assert scores["status_accuracy"] >= 0.95 and scores["span_recall"] >= 0.95, scores


def test_the_trigger_lexicon_is_data_read_once():
    """The lexicon ships as JSON (`resources/lexicon.json`): every group holds valid patterns, and the
    rule engine's patterns are built from it."""
    import json
    import re
    from importlib import resources

    from medreco.data.reports import lexicon, scopes

    data = json.loads(resources.files("medreco.data.reports.resources").joinpath(lexicon.LEXICON_FILE).read_text())
    groups = {name: group for name, group in data.items() if isinstance(group, dict)}
    assert {"pseudo", "negative_pre", "uncertain_post", "abnormal_cues", "section_headings"} <= set(groups)
    for name, group in groups.items():
        assert group["about"], name
        for entry in group.get("patterns", []):
            re.compile(entry if isinstance(entry, str) else entry["pattern"])
    assert lexicon.NEGATIVE_PRE and all(isinstance(p, str) for p in lexicon.NEGATIVE_PRE)
    assert "no" in lexicon.NEGATIVE_PRE and scopes.ABNORMAL_CUE.search("an enlarged spleen")
    assert scopes.sentence_status("Pneumonia cannot be excluded.") is U
