import pytest

from medreco.data.mining.benchmark import score_change_labels
from medreco.data.mining.longitudinal import INVERSE, change_label, consistent_change_label
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.data.reports.attributes import read_attributes
from medreco.data.reports.decomposition import EntityStatement, MentionStatus, RuleBasedDecomposer

P, N, U, M = MentionStatus.POSITIVE, MentionStatus.NEGATIVE, MentionStatus.UNCERTAIN, MentionStatus.NOT_MENTIONED


def statement(status, *sentences):
    return EntityStatement("x", status, list(sentences))


def test_attributes_read_the_current_state_only():
    a = read_attributes("There is an 18 mm spiculated part-solid nodule in the right upper lobe, increased from 12 mm.")
    assert a.size_mm == 18 and a.margins == "spiculated" and a.density == "part-solid"
    assert a.lobes == {"right upper lobe"} and a.side == "right" and a.change_cue == "increased"
    assert read_attributes("Moderate bilateral pleural effusions.").side == "bilateral"
    assert read_attributes("A 1.5 cm mass.").size_mm == 15
    assert read_attributes("3 pulmonary nodules, up to 7 mm.").number == 3
    assert read_attributes("The heart is moderately enlarged, unchanged.").change_cue == "stable"


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
