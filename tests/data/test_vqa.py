import itertools
from collections import Counter

import pytest

from medreco.data.mining.vqa import (
    LETTERS,
    MajorityAnswerer,
    TextOnlyAnswerer,
    VQASample,
    deduplicate,
    depends_on_both_images,
    filter_vqa,
    open_question,
    sample_pairs,
    shuffle_and_swap,
    template_answer,
    vqa_over_pairs,
)
from medreco.data.phantom import PhantomConfig, generate_cohort, read_ground_truth
from medreco.data.reports.decomposition import RuleBasedDecomposer
from medreco.data.reports.statement import EntityStatement, MentionStatus

P, N = MentionStatus.POSITIVE, MentionStatus.NEGATIVE


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    out = tmp_path_factory.mktemp("vqa")
    records = generate_cohort(PhantomConfig(num_patients=18, size="tiny", seed=4), out, progress=False)
    decomposer = RuleBasedDecomposer()
    statements = {r.study_id: decomposer.decompose(r.report, r.modality).statements for r in records}
    modality = {r.study_id: r.modality for r in records}
    pairs = [
        (a.study_id, b.study_id, a.patient_id == b.patient_id)
        for m in ("chest_xray", "chest_ct")
        for a, b in itertools.combinations([r for r in records if r.modality == m], 2)
    ]
    samples = vqa_over_pairs(pairs, statements, lambda study: decomposer.ontology.entities(modality[study], "abnormal"))
    return out, records, decomposer, statements, samples


def test_questions_are_four_option_and_cover_the_dimensions(mined):
    *_, samples = mined
    dimensions = Counter(s.dimension for s in samples)
    assert {"presence", "size", "location", "change"} <= set(dimensions)
    for sample in samples:
        assert len(sample.options) == 4 and len(set(sample.options)) == 4 and sample.answer in LETTERS
        assert all(isinstance(o, str) for o in sample.options) and sample.open_answer


NEW_DIMENSIONS = {
    "morphology",
    "internal characteristics",
    "associated findings",
    "aetiology",
    "distribution",
    "composition",
}


def test_the_mined_questions_cover_the_papers_descriptive_dimensions(mined):
    from medreco.data.mining.longitudinal import consistent_change_label

    _, records, _, statements, samples = mined
    assert {s.dimension for s in samples} >= NEW_DIMENSIONS
    lobes = [s for s in samples if s.dimension == "location" and "lobe" in s.open_answer]
    assert lobes and all("the location of" in s.question for s in lobes)
    # the follow-up labels of the same cohort (as `longitudinal_labels` mines them) name the new kinds
    attributes = {
        label.attribute
        for record in records
        if record.prior_study_id is not None
        for entity_id, current in statements[record.study_id].items()
        if (label := consistent_change_label(statements[record.prior_study_id][entity_id], current)) is not None
    }
    assert attributes >= {"composition", "distribution", "presence", "size"}


@pytest.mark.parametrize(
    ("text_a", "text_b", "dimension", "answer"),
    [
        ("A round 9 mm nodule.", "An oval 9 mm nodule.", "morphology", "Round in Case A, oval in Case B"),
        (
            "A nodule with internal calcification.",
            "A heterogeneous nodule with cavitation.",
            "internal characteristics",
            "Calcification in Case A, heterogeneous content and cavitation in Case B",
        ),
        (
            "Atelectasis with volume loss.",
            "Atelectasis with volume loss.",
            "associated findings",
            "Volume loss in both",
        ),
        (
            "Consolidation, likely infectious.",
            "Consolidation, likely inflammatory.",
            "aetiology",
            "Infectious in Case A, inflammatory in Case B",
        ),
        ("Focal consolidation.", "Patchy consolidation.", "distribution", "Focal in Case A, patchy in Case B"),
        ("A solid nodule.", "A part-solid nodule.", "composition", "Solid in Case A, part-solid in Case B"),
        (
            "Consolidation in the right upper lobe.",
            "Consolidation in the left lower lobe.",
            "location",
            "Right upper lobe in Case A, left lower lobe in Case B",
        ),
        ("Consolidation in the right upper lobe.", "Right upper lobe consolidation.", "location", "The same lobe"),
    ],
)
def test_questions_per_descriptive_dimension(text_a, text_b, dimension, answer):
    import numpy as np

    from medreco.data.mining.questions import closed_questions
    from medreco.data.reports.ontology import Ontology

    entity = Ontology.load().find("consolidation", "chest_ct")
    a, b = EntityStatement(entity.id, P, [text_a]), EntityStatement(entity.id, P, [text_b])
    asked = {
        d: (o, letter, reference)
        for d, _, o, letter, reference in closed_questions(a, b, entity, np.random.default_rng(1))
    }
    options, letter, reference = asked[dimension]
    assert options[LETTERS.index(letter)] == answer and len(set(options)) == 4
    assert reference and open_question(dimension, "consolidation") != open_question("presence", "consolidation")
    sample = VQASample("a", "b", entity.id, dimension, "q", options, letter, "q", reference)
    # both images are needed: the answer changes when either finding is absent
    assert depends_on_both_images(sample, a, b, template_answer(sample, entity))
    assert all("acoustic" not in o for o in options)  # distractors plausible for a chest CT


def test_presence_answers_match_the_image_truth(mined):
    out, records, decomposer, _, samples = mined
    truth = {
        r.study_id: {f["entity"]: f["present"] for f in read_ground_truth(out, r.study_id)["findings"]} for r in records
    }
    checked = 0
    for sample in samples:
        entity = decomposer.ontology[sample.entity_id]
        present = [t for name, t in truth[sample.study_a].items() if decomposer.ontology.find(name).term == entity.term]
        present_b = [
            t for name, t in truth[sample.study_b].items() if decomposer.ontology.find(name).term == entity.term
        ]
        if sample.dimension != "presence" or not present or not present_b:
            continue
        first, second = sample.labels
        expected = {
            (True, True): "Both cases",
            (False, False): "Neither case",
            (True, False): f"{first} only",
            (False, True): f"{second} only",
        }[(present[0], present_b[0])]
        assert sample.answer_text == expected
        checked += 1
    assert checked > 100


def test_image_dependency_catches_single_image_questions():
    a, b = EntityStatement("e", P, ["Small left effusion."]), EntityStatement("e", N, ["No effusion."])
    sample = VQASample(
        "a", "b", "e", "presence", "Is there an effusion in Case A?", ["Yes", "No", "Maybe", "Unknown"], "A", "q", "Yes"
    )

    def only_case_a(x, y):
        return "Yes" if x.status is P else "No"

    assert not depends_on_both_images(sample, a, b, only_case_a)

    def both(x, y):
        return "Yes" if (x.status is P) != (y.status is P) else "No"

    assert depends_on_both_images(sample, a, b, both)


def test_shuffle_and_swap_keep_the_answer_right():
    import numpy as np

    sample = VQASample(
        "s1",
        "s2",
        "e",
        "presence",
        "Which case shows effusion?",
        ["Case A only", "Case B only", "Both cases", "Neither case"],
        "A",
        "q",
        "Only Case A shows effusion.",
    )
    for seed in range(10):
        shuffled = shuffle_and_swap(sample, np.random.default_rng(seed))
        if shuffled.meta.get("swapped"):
            assert (shuffled.study_a, shuffled.answer_text) == ("s2", "Case B only")
            assert shuffled.open_answer == "Only Case B shows effusion."
        else:
            assert shuffled.answer_text == "Case A only"
    assert len(deduplicate([sample, sample])) == 1


def test_filters_and_the_language_prior(mined):
    _, _, decomposer, statements, samples = mined
    entities = {e.id: e for e in decomposer.ontology.entities()}
    final, report = filter_vqa(samples, statements, entities)
    assert report.generated == len(samples) and 0 < report.after_language_prior < report.after_duplicates
    assert 0.0 < report.language_prior_removed_share < 0.8
    removed = report.removed()  # every filter's count and share, as the mining summary reports them
    assert set(removed) == {"image_dependency", "duplicates", "language_prior"}
    assert removed["language_prior"]["share"] == round(report.language_prior_removed_share, 4)
    assert sum(r["removed"] for r in removed.values()) == report.generated - report.after_language_prior
    answers = Counter(s.answer for s in final)
    assert max(answers.values()) / len(final) < 0.35  # no letter dominates after shuffling
    # the text-only answerer really learns priors: on a skewed toy set it picks the frequent answer
    skewed = [
        VQASample(
            "a", "b", "e", "change", "How has it changed?", ["stable", "new", "resolved", "increased"], "A", "q", "x"
        )
    ] * 20
    assert (
        TextOnlyAnswerer().fit(skewed).predict("How has it changed?", ["new", "increased", "stable", "resolved"]) == "C"
    )
    assert (
        template_answer(final[0], entities[final[0].entity_id])(
            statements[final[0].study_a][final[0].entity_id], statements[final[0].study_b][final[0].entity_id]
        )
        is not None
    )


def test_the_language_prior_filter_judges_the_chosen_questions_only(mined):
    """Mining filters the training split alone: questions it does not judge all reach the output,
    and what it removes is handed back (to fit text-only baselines before the filter)."""
    _, _, decomposer, statements, samples = mined
    entities = {e.id: e for e in decomposer.ontology.entities()}
    judged = set(sorted(statements)[::2])  # "training" questions: those whose first study is every other one

    def is_judged(sample):
        return sample.study_a in judged

    final, report = filter_vqa(samples, statements, entities, prior_filtered=is_judged)
    unjudged = [s for s in deduplicate(samples) if not is_judged(s)]
    assert unjudged and report.reached_language_prior < report.after_duplicates
    kept_keys = Counter((s.study_a, s.study_b, s.entity_id, s.dimension) for s in final)
    for s in unjudged:  # every unjudged question survives (possibly with its cases swapped)
        assert (
            kept_keys[(s.study_a, s.study_b, s.entity_id, s.dimension)]
            + kept_keys[(s.study_b, s.study_a, s.entity_id, s.dimension)]
            >= 1
        )
    removed = report.removed_by_language_prior
    assert removed and all(s.study_a in judged or s.study_b in judged for s in removed)  # swapped or not
    assert report.reached_language_prior == sum(map(is_judged, deduplicate(samples)))
    assert len(final) + len(removed) == report.after_duplicates
    assert report.removed()["language_prior"] == {
        "removed": len(removed),
        "share": round(len(removed) / report.reached_language_prior, 4),
        "reached": report.reached_language_prior,
    }


def test_majority_answer_by_hand():
    def sample(options, answer):
        return VQASample("a", "b", "e", "change", "q?", options, answer, "", "")

    train = [
        sample(["stable", "new", "resolved", "increased"], "A"),  # stable
        sample(["new", "stable", "resolved", "increased"], "B"),  # stable
        sample(["new", "stable", "resolved", "increased"], "A"),  # new
    ]
    majority = MajorityAnswerer().fit(train)
    assert majority.predict("anything", ["resolved", "increased", "Stable", "new"]) == "C"  # stable: 2
    assert majority.predict("anything", ["resolved", "new", "increased", "decreased"]) == "B"  # new: 1
    assert majority.predict("anything", ["w", "x", "y", "z"]) == "A"  # all unseen: the first


def test_longitudinal_questions_from_the_follow_up_table():
    from medreco.data.mining.vqa import CHANGE_OPTIONS, LETTERS, change_sentence, longitudinal_questions
    from medreco.data.reports.ontology import Ontology

    rows = [
        {
            "prior": "P1-CT1",
            "current": "P1-CT2",
            "entity_id": "ct/abnormal/pleural-effusion@pleura",
            "label": label,
            "attribute": attribute,
            "split": "test",
        }
        for label, attribute in (("new", "presence"), ("increased", "size"), ("stable", "overall"))
    ]
    questions = longitudinal_questions(rows, Ontology.load(), seed=3)
    assert questions == longitudinal_questions(rows, Ontology.load(), seed=3)  # reproducible
    for row, question in zip(rows, questions):
        assert question["study_a"] == "P1-CT1" and question["study_b"] == "P1-CT2"
        assert len(question["options"]) == 4 and len(set(question["options"])) == 4
        assert set(question["options"]) <= set(CHANGE_OPTIONS)
        assert question["options"][LETTERS.index(question["answer"])] == row["label"]
        assert "pleural effusion" in question["question"] and question["label"] == row["label"]
    assert [q["open_answer"] for q in questions] == [
        "The pleural effusion is new.",
        "The pleural effusion has increased in size.",
        "The pleural effusion is stable.",
    ]
    assert change_sentence("nodule", "qualitatively changed", "margins") == "The margins of the nodule have changed."
    assert change_sentence("consolidation", "qualitatively changed", "location") == (
        "The consolidation has changed in location."
    )
    assert change_sentence("nodule", "qualitatively changed", "overall") == "The nodule has changed in character."


def test_sampled_pairs_cap_every_study_and_patient_unlike_the_first_combinations():
    # 25 patients; one has 20 studies (a frequent flyer), the others 2 each
    patient_of = {f"S{p:02d}-{i:02d}": f"P{p:02d}" for p in range(1, 25) for i in range(2)}
    patient_of |= {f"S00-{i:02d}": "P00" for i in range(20)}
    studies, budget = sorted(patient_of), 120
    pairs = sample_pairs(studies, patient_of, budget, seed=0)
    assert len(pairs) == budget and len(set(pairs)) == budget and all(a < b for a, b in pairs)

    def largest_share(chosen):
        sides = Counter(patient_of[s] for pair in chosen for s in pair)
        return max(sides.values()) / (2 * len(chosen))

    assert largest_share(pairs) <= 0.06  # balanced: 1/25 = 0.04 each, at most one pair more
    studies_used = Counter(s for pair in pairs for s in pair)
    assert max(studies_used.values()) <= 2 * budget // len(studies) + 2
    first = list(itertools.islice(itertools.combinations(studies, 2), budget))  # the old sampling
    assert largest_share(first) > 0.4  # the frequent flyer on one side of nearly every pair
    assert sample_pairs(studies, patient_of, budget, seed=0) == pairs  # reproducible
    assert sample_pairs(studies, patient_of, budget, seed=1) != pairs
    few = studies[:4]  # fewer combinations than the budget: all of them
    assert sorted(sample_pairs(few, patient_of, budget)) == list(itertools.combinations(few, 2))


def test_open_questions_are_unique_per_pair_and_dimension(mined):
    *_, samples = mined
    answers = {}
    for sample in samples:
        answers.setdefault((sample.study_a, sample.study_b, sample.open_question), set()).add(sample.open_answer)
    assert all(len(found) == 1 for found in answers.values())
    assert open_question("size", "nodule") == "Compare the size of the nodule in Case B with Case A."
    assert open_question("presence", "pleural effusion") != open_question("size", "pleural effusion")


def test_presence_of_a_structure_asks_about_an_abnormality():
    """Every case shows the kidney: a structure's presence question asks which case shows it abnormal."""
    import numpy as np

    from medreco.data.mining.questions import closed_questions, entity_noun
    from medreco.data.reports.ontology import Ontology

    ontology = Ontology.load()
    kidney, cyst = ontology.find("kidneys", "abdominal_ct"), ontology.find("renal cyst", "abdominal_ct")
    a, b = EntityStatement(kidney.id, P, ["Left renal cyst."]), EntityStatement(kidney.id, N, ["Kidneys are normal."])
    (presence, question, options, letter, text), *_ = closed_questions(a, b, kidney, np.random.default_rng(0))
    assert presence == "presence" and question == f"Which case shows an abnormality of the {entity_noun(kidney)}?"
    assert options["ABCD".index(letter)] == "Case A only" and text.startswith("Only Case A shows an abnormality")
    assert closed_questions(a, b, cyst, np.random.default_rng(0))[0][1] == f"Which case shows {entity_noun(cyst)}?"
    samples = vqa_over_pairs([("s1", "s2", False)], {"s1": {kidney.id: a}, "s2": {kidney.id: b}}, lambda _: [kidney])
    assert "an abnormality of the" in next(s.open_question for s in samples if s.dimension == "presence")
