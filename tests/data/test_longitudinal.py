import pytest

from medreco.data.mining.longitudinal import change_label, consistent_change_label
from medreco.data.mining.scoring import score_change_labels
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.data.reports.attributes import location_phrases, read_attributes, read_stated_prior
from medreco.data.reports.change import INVERSE_CHANGE as INVERSE
from medreco.data.reports.decomposition import RuleBasedDecomposer
from medreco.data.reports.statement import EntityStatement, MentionStatus

P, N, U, M = MentionStatus.POSITIVE, MentionStatus.NEGATIVE, MentionStatus.UNCERTAIN, MentionStatus.NOT_MENTIONED


def statement(status, *sentences):
    return EntityStatement("x", status, list(sentences))


def test_attributes_read_the_current_state_only():
    a = read_attributes("There is an 18 mm spiculated part-solid nodule in the right upper lobe, increased from 12 mm.")
    assert a.size_mm == 18 and a.margins == "spiculated" and a.composition == a.density == "part-solid"
    assert a.lobes == {"right upper lobe"} and a.side == "right" and a.change_cue == "increased"
    assert read_attributes("Moderate bilateral pleural effusions.").side == "bilateral"
    assert read_attributes("A 1.5 cm mass.").size_mm == 15
    assert read_attributes("3 pulmonary nodules, up to 7 mm.").number == 3
    assert read_attributes("The heart is moderately enlarged, unchanged.").change_cue == "stable"


@pytest.mark.parametrize(
    ("text", "name", "value"),
    [
        ("A round 12 mm nodule.", "morphology", "round"),
        ("An irregularly shaped opacity with irregular margins.", "morphology", "irregular"),
        ("Plate-like atelectasis at the left base.", "morphology", "linear"),
        ("A heterogeneous nodule with internal calcification.", "internal", {"heterogeneous", "calcification"}),
        ("Consolidation with air bronchograms and cavitation.", "internal", {"air bronchograms", "cavitation"}),
        ("A lymph node with central necrosis.", "internal", {"necrosis"}),
        ("Atelectasis with volume loss, without mass effect.", "associated", {"volume loss"}),
        ("A lesion with surrounding oedema and mass effect.", "associated", {"oedema", "mass effect"}),
        ("A hypoechoic nodule with posterior acoustic shadowing.", "associated", {"posterior acoustic shadowing"}),
        ("Consolidation, likely infectious.", "aetiology", "infectious"),
        ("A spiculated nodule, suspicious for malignancy.", "aetiology", "neoplastic"),
        ("Enlarged nodes, likely reactive, no evidence of malignancy.", "aetiology", "inflammatory"),
        ("Patchy consolidation in the right lower lobe.", "distribution", "patchy"),
        ("Diffusely decreased attenuation of the liver.", "distribution", "diffuse"),
        ("Multifocal opacities.", "distribution", "multifocal"),
        ("A peripheral opacity in the left upper zone.", "location", {"peripheral", "upper zone"}),
        ("Nodule in the right lower lobe.", "location", {"right lower lobe"}),
        ("A cavity with central necrosis.", "location", set()),  # "central necrosis" is not a location
        ("A fat-containing cystic lesion.", "composition", "cystic"),
    ],
)
def test_descriptive_attributes(text, name, value):
    read = getattr(read_attributes(text), name)
    assert (set(read) if isinstance(value, set) else read) == value
    assert read_attributes(text).comparable() == read_attributes(text).comparable()  # sets as sorted tuples


def test_location_phrases_compare_at_the_finest_shared_granularity():
    lobe, zone = (
        read_attributes("Opacity in the right upper lobe."),
        read_attributes("Opacity in the right lower zone."),
    )
    assert location_phrases(lobe, read_attributes("Opacity in the left lower lobe.")) == (
        "right upper lobe",
        "left lower lobe",
        "lobe",
    )
    assert location_phrases(lobe, zone) == ("right", "right", "side")  # lobe vs zone: only the side is shared
    assert location_phrases(zone, read_attributes("Left lower zone opacity.")) == (
        "right lower zone",
        "left lower zone",
        "zone",
    )
    assert location_phrases(read_attributes("Opacity."), zone) is None
    assert read_stated_prior("Nodule, now part-solid where the prior study showed solid composition.").composition == (
        "solid"
    )


def test_a_statement_carries_its_attributes_read_once(monkeypatch):
    """A statement's attributes are read when it is made (by a decomposer, or from a mined cache):
    comparing statements, as change labels and questions do, reads no text again, and filling the
    older report's gaps from the newer one's words changes neither statement."""
    import numpy as np

    from medreco.data.mining.questions import closed_questions
    from medreco.data.reports import attributes
    from medreco.data.reports.ontology import Ontology

    text = "A 9 mm nodule, now part-solid where the prior study showed solid composition."
    newer, older = statement(P, text), statement(P, "A 9 mm nodule.")
    assert newer.attributes == read_attributes(text) and newer.prior_attributes == read_stated_prior(text)
    assert statement(M).attributes == read_attributes("")
    decomposed = RuleBasedDecomposer().decompose("Findings: A 2 cm spiculated mass in the left lower lobe.", "chest_ct")
    mass = next(s for s in decomposed.mentioned().values() if s.attributes.size_mm == 20)
    assert mass.attributes == read_attributes(mass.text)

    def read_again(*_):
        raise AssertionError("a statement's text was read again")

    monkeypatch.setattr(attributes, "_read", read_again)
    label = consistent_change_label(older, newer)
    assert (label.label, label.attribute) == ("qualitatively changed", "composition")
    assert older.attributes.composition is None  # the gap was filled in a copy
    nodule = Ontology.load().find("nodule", "chest_ct")
    assert closed_questions(older, newer, nodule, np.random.default_rng(0))


def test_statements_read_back_from_a_mining_cache_carry_their_attributes():
    """The cache and the studies table keep a statement's status and sentences only (the format is
    unchanged); its attributes are read once, when it is read back."""
    from medreco.data.mining.pipeline import _as_decompositions
    from medreco.data.reports.ontology import Ontology

    raw = {"s1": {"x": {"status": "positive", "sentences": ["Moderate left pleural effusion."]}}}
    rows = [{"study_id": "s1", "modality": "chest_xray"}]
    effusion = _as_decompositions(rows, raw, Ontology.load())["s1"].statements["x"]
    assert (effusion.attributes.grade, effusion.attributes.side) == (2, "left")


@pytest.mark.parametrize(
    ("before", "after", "attribute"),
    [
        ("Consolidation in the right lower lobe.", "Consolidation in the left upper lobe.", "location"),
        (
            "Focal consolidation in the right lower lobe.",
            "Patchy consolidation in the right lower lobe.",
            "distribution",
        ),
        ("A small right pleural effusion.", "Small bilateral pleural effusions.", "distribution"),
        ("A 12 mm solid nodule.", "A 12 mm part-solid nodule.", "composition"),
        ("Consolidation with air bronchograms.", "Consolidation with cavitation.", "composition"),
        ("A round 9 mm nodule.", "An irregularly shaped 9 mm nodule.", "morphology"),
        # the older report does not state it; the newer one says what the prior showed
        (
            "A 9 mm nodule.",
            "A 9 mm nodule, now part-solid where the prior study showed solid composition.",
            "composition",
        ),
        (
            "Consolidation in the left lower lobe.",
            "Patchy consolidation in the left lower lobe, previously focal.",
            "distribution",
        ),
    ],
)
def test_qualitative_change_kinds(before, after, attribute):
    label = consistent_change_label(statement(P, before), statement(P, after))  # checked in both directions
    assert (label.label, label.attribute) == ("qualitatively changed", attribute)
    # an attribute one report leaves unsaid is no change; size still outranks the qualitative kinds
    assert consistent_change_label(statement(P, "Consolidation."), statement(P, after)).label == (
        "qualitatively changed" if "previously" in after or "where the prior" in after else "stable"
    )
    assert consistent_change_label(statement(P, "A 10 mm " + before), statement(P, "A 16 mm " + after)).label == (
        "increased"
    )


def test_synthetic_reports_state_the_new_change_kinds():
    """Chest findings evolved and written as reports (no images: fast): every location,
    distribution and composition change the cohort makes is read back with its attribute (when
    both reports call the finding present)."""
    import numpy as np

    from medreco.data.mining.scoring import phantom_entity
    from medreco.data.phantom.findings import evolve, sample_finding
    from medreco.data.phantom.reports import write_report

    decomposer, found = RuleBasedDecomposer(), {}
    rng = np.random.default_rng(0)
    for index in range(300):
        modality = ("chest_xray", "chest_ct")[index % 2]
        prior = [sample_finding(key, rng, True) for key in ("consolidation", "lung_nodule")]
        evolved = [evolve(f, rng) for f in prior]
        current, changes = [f for f, _ in evolved], {f.key: c for f, (_, c) in zip(prior, evolved) if c}
        before, _ = write_report(modality, prior, rng)
        after, _ = write_report(modality, current, rng, prior, changes, 30)
        for key, change in changes.items():
            if change["label"] != "qualitatively changed":
                continue
            entity = phantom_entity(decomposer.ontology, key, modality)
            a = decomposer.decompose(before, modality, [entity]).statements[entity.id]
            b = decomposer.decompose(after, modality, [entity]).statements[entity.id]
            label = consistent_change_label(a, b)
            if label is None:  # the prior report called it uncertain
                continue
            found[change["attribute"]] = found.get(change["attribute"], 0) + 1
            assert (label.label, label.attribute) == (change["label"], change["attribute"]), (before, after)
    assert {"location", "distribution", "composition", "margins"} <= set(found), found


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (statement(N, "No pleural effusion."), statement(P, "Small left pleural effusion."), "new"),
        (statement(P, "Small left pleural effusion."), statement(N, "The effusion has resolved."), "resolved"),
        (statement(P, "A 10 mm nodule."), statement(P, "A 16 mm nodule."), "increased"),
        (statement(P, "A 16 mm nodule."), statement(P, "A 10 mm nodule."), "decreased"),
        (statement(P, "A 10 mm nodule."), statement(P, "A 11 mm nodule."), "stable"),  # within measurement noise
        (statement(P, "Small effusion."), statement(P, "Large effusion."), "increased"),
        (statement(P, "A smooth 9 mm nodule."), statement(P, "A spiculated 9 mm nodule."), "qualitatively changed"),
        (
            statement(P, "Consolidation in the left lower lobe."),
            statement(P, "Consolidation in the left lower lobe, increased."),
            "increased",
        ),
        (statement(P, "Effusion."), statement(U, "Possible effusion."), "unable to compare"),
        (statement(M), statement(P, "Effusion."), "unable to compare"),
    ],
)
def test_change_labels(before, after, expected):
    assert change_label(before, after).label == expected


def test_absent_twice_has_no_label_and_bidirectional_check():
    assert change_label(statement(N, "No effusion."), statement(N, "No new effusion.")) is None
    forward = consistent_change_label(statement(P, "A 10 mm nodule."), statement(P, "A 16 mm nodule."))
    assert forward.label == "increased"
    # measured sizes outrank wording: both directions read the sizes, so the label is kept
    assert (
        consistent_change_label(statement(P, "A 16 mm nodule."), statement(P, "A 10 mm nodule, increased.")).label
        == "decreased"
    )
    assert consistent_change_label(statement(P, "Effusion."), statement(U, "Possible effusion.")) is None
    assert all(INVERSE[INVERSE[k]] == k for k in INVERSE)


def test_change_label_accuracy_on_the_synthetic_cohort(tmp_path):
    generate_cohort(PhantomConfig(num_patients=20, size="tiny", seed=5), tmp_path, progress=False)
    scores = score_change_labels(RuleBasedDecomposer(), tmp_path)
    assert scores["kept"] >= 0.7 * scores["pairs"]
    assert scores["accuracy_on_kept"] >= 0.95, scores
