"""Swap consistency: the answer about (B, A) is the inverse of the answer about (A, B)."""

from types import SimpleNamespace

import numpy as np
import pytest

from medreco.data.mining.questions import closed_questions, entity_noun
from medreco.data.mining.vqa import LETTERS, change_sentence, longitudinal_questions
from medreco.data.reports.ontology import Ontology
from medreco.data.reports.statement import EntityStatement, MentionStatus
from medreco.evaluation import (
    evaluate_swap_consistency,
    inverse_option,
    swap_comparison,
    swap_consistency,
    swapped_row,
)
from medreco.evaluation.swap import combined_letter

CASES, FOLLOW_UP = ("Case A", "Case B"), ("Prior", "Current")
PRESENCE = ["Case B only", "Both cases", "Case A only", "Neither case"]
SIZE = ["Similar in both", "Larger in Case B", "Absent in Case B", "Smaller in Case B"]
NUMBER = ["Fewer in Case B", "Similar in both", "More numerous in Case B", "Absent in Case B"]
MARGINS = [
    "Smooth in Case A, spiculated in Case B",
    "Spiculated in Case A, smooth in Case B",
    "Smooth in both",
    "Lobulated in Case A, smooth in Case B",
]
LOCATION = [
    "Right upper lobe in Case A, left lower lobe in Case B",
    "The same lobe",
    "Left lower lobe in Case A, right upper lobe in Case B",
    "Left upper lobe in Case A, right upper lobe in Case B",
]
CHANGE = ["new", "stable", "resolved", "increased"]


def test_presence_size_and_number_inverses():
    assert inverse_option("Case A only", PRESENCE, CASES, "presence") == "Case B only"
    assert inverse_option("Case B only", PRESENCE, CASES, "presence") == "Case A only"
    assert inverse_option("Both cases", PRESENCE, CASES, "presence") == "Both cases"
    assert inverse_option("Neither case", PRESENCE, CASES, "presence") == "Neither case"
    follow_up = ["Prior only", "Current only", "Both cases", "Neither case"]
    assert inverse_option("Prior only", follow_up, FOLLOW_UP, "presence") == "Current only"
    assert inverse_option("Case A only", follow_up, FOLLOW_UP, "presence") is None  # labels are the row's
    assert inverse_option("Larger in Case B", SIZE, CASES, "size") == "Smaller in Case B"
    assert inverse_option("Smaller in Case B", SIZE, CASES, "size") == "Larger in Case B"
    assert inverse_option("Similar in both", SIZE, CASES, "size") == "Similar in both"
    assert inverse_option("Absent in Case B", SIZE, CASES, "size") is None
    assert inverse_option("More numerous in Case B", NUMBER, CASES, "number") == "Fewer in Case B"
    assert inverse_option("Fewer in Case B", NUMBER, CASES, "number") == "More numerous in Case B"
    # a question mining flipped ("... in Case A compare with Case B?") keeps its label
    assert inverse_option("Larger in Case A", ["Smaller in Case A", "Larger in Case A"], CASES, "size") == (
        "Smaller in Case A"
    )


def test_categorical_location_and_change_inverses():
    assert inverse_option(MARGINS[0], MARGINS, CASES, "margins") == "Spiculated in Case A, smooth in Case B"
    assert inverse_option(MARGINS[1], MARGINS, CASES, "margins") == "Smooth in Case A, spiculated in Case B"
    assert inverse_option("Smooth in both", MARGINS, CASES, "margins") == "Smooth in both"
    assert inverse_option(MARGINS[3], MARGINS, CASES, "margins") is None  # "Smooth in Case A, lobulated ..." absent
    flipped = ["Smooth in Case B, spiculated in Case A", "Spiculated in Case B, smooth in Case A"]
    assert inverse_option(flipped[0], flipped, CASES, "margins") == flipped[1]
    assert inverse_option(LOCATION[0], LOCATION, CASES, "location") == LOCATION[2]
    assert inverse_option("The same lobe", LOCATION, CASES, "location") == "The same lobe"
    assert inverse_option("The same side", ["The same side"], CASES, "location") == "The same side"
    assert inverse_option("new", CHANGE, FOLLOW_UP, "change") == "resolved"
    assert inverse_option("resolved", CHANGE, FOLLOW_UP, "change") == "new"
    assert inverse_option("stable", CHANGE, FOLLOW_UP, "change") == "stable"
    assert inverse_option("increased", CHANGE, FOLLOW_UP, "change") is None  # "decreased" is not an option
    assert inverse_option("decreased", ["increased"], FOLLOW_UP, "change") == "increased"
    changed = ["qualitatively changed", "new"]
    assert inverse_option("qualitatively changed", changed, FOLLOW_UP, "change") == "qualitatively changed"


@pytest.mark.parametrize(
    "term, text_a, text_b",
    [
        (
            "nodule",
            "A 10 mm smooth nodule in the right upper lobe.",
            "A 25 mm spiculated nodule in the left lower lobe.",
        ),
        ("nodule", "2 solid nodules.", "4 part-solid nodules."),
        ("nodule", "A round nodule, likely infectious.", "An oval nodule, likely neoplastic."),
        ("nodule", "A 10 mm nodule.", "An 11 mm nodule."),
        ("effusion", "Small right pleural effusion.", "Large left pleural effusion."),
        ("consolidation", "Focal consolidation.", "Patchy consolidation."),
        ("consolidation", "Consolidation in the right upper lobe.", "Right upper lobe consolidation."),
    ],
)
def test_the_inverse_is_what_the_template_answers_for_the_swapped_reports(term, text_a, text_b):
    """For every question mining writes about two reports, the inverse of its answer is the answer
    mining writes when the two reports come in the other order."""
    ontology = Ontology.load()
    entity = ontology.find(term, "chest_ct")
    P = MentionStatus.POSITIVE
    a, b = EntityStatement(entity.id, P, [text_a]), EntityStatement(entity.id, P, [text_b])
    forward = closed_questions(a, b, entity, np.random.default_rng(0))
    backward = {q[0]: q for q in closed_questions(b, a, entity, np.random.default_rng(0))}
    assert len(forward) >= 2  # presence and at least one comparison
    for dimension, question, options, letter, _ in forward:
        _, other_question, other_options, other_letter, _ = backward[dimension]
        assert other_question == question
        answer, swapped_answer = options[LETTERS.index(letter)], other_options[LETTERS.index(other_letter)]
        assert inverse_option(answer, [swapped_answer], CASES, dimension) == swapped_answer, (dimension, answer)
    N = MentionStatus.NEGATIVE
    (_, _, options, letter, _), *_ = closed_questions(
        a, EntityStatement(entity.id, N, ["None."]), entity, np.random.default_rng(0)
    )
    assert inverse_option(options[LETTERS.index(letter)], options, CASES, "presence") == "Case B only"


def row(options, answer, dimension="presence", labels=CASES, a="S1", b="S2", **extra):
    return {
        "study_a": a,
        "study_b": b,
        "entity_id": "e",
        "dimension": dimension,
        "question": "Which case shows pleural effusion?",
        "options": list(options),
        "answer": answer,
        "open_question": "Describe whether Case A and Case B show pleural effusion.",
        "open_answer": "Only Case A shows pleural effusion.",
        "labels": list(labels),
        "split": "test",
        **extra,
    }


def test_swapped_row_exchanges_the_studies_and_inverts_the_answer():
    original = row(PRESENCE, "C", image_answerable=True, answerability_reason="")  # Case A only
    swapped = swapped_row(original)
    assert (swapped["study_a"], swapped["study_b"]) == ("S2", "S1")
    assert swapped["answer"] == "A" and swapped["options"] == PRESENCE and swapped["question"] == original["question"]
    assert swapped["open_answer"] == "Only Case B shows pleural effusion."
    assert swapped["image_answerable"] is True and swapped["split"] == "test"
    assert swapped["swapped_of"] == {"study_a": "S1", "study_b": "S2", "answer": "C"}
    assert original["answer"] == "C" and "swapped_of" not in original  # the row itself is left alone
    assert swapped_row(swapped) == original  # swapped twice: the original row again
    assert swapped_row(row(PRESENCE, "B"))["answer"] == "B"  # Both cases
    assert swapped_row(row(SIZE, "B", "size"))["answer"] == "D"
    assert swapped_row(row(MARGINS, "A", "margins"))["answer"] == "B"
    assert swapped_row(row(MARGINS, "D", "margins")) is None  # its inverse is not among the options
    assert swapped_row(row(SIZE, "C", "size")) is None  # "Absent in Case B" has no inverse


def test_a_follow_up_row_swaps_its_change_label_and_sentence():
    ontology = Ontology.load()
    entity = ontology.find("nodule", "chest_ct")
    mined = [
        {"prior": "S1", "current": "S2", "entity_id": entity.id, "label": "increased", "attribute": "size"},
        {"prior": "S3", "current": "S4", "entity_id": entity.id, "label": "new", "attribute": "presence"},
    ]
    checked = 0
    for follow_up in longitudinal_questions([{**m, "split": "test"} for m in mined], ontology):
        expected = {"increased": "decreased", "new": "resolved"}[follow_up["label"]]
        swapped = swapped_row(follow_up)
        if expected not in follow_up["options"]:  # the inverse was not drawn among the options
            assert swapped is None
            continue
        assert swapped["options"][LETTERS.index(swapped["answer"])] == expected == swapped["label"]
        assert swapped["attribute"] == follow_up["attribute"] and swapped["labels"] == ["Prior", "Current"]
        assert swapped["open_answer"] == change_sentence(entity_noun(entity), expected, follow_up["attribute"])
        assert swapped_row(swapped) == follow_up
        checked += 1
    assert checked


# ---- swap_consistency from letters


def eligible_rows():
    return [
        row(PRESENCE, "C"),  # Case A only -> Case B only (A)
        row(PRESENCE, "A"),  # Case B only -> Case A only (C)
        row(SIZE, "B", "size"),  # Larger -> Smaller (D)
        row(MARGINS, "A", "margins"),  # -> B
        row(CHANGE, "A", "change", FOLLOW_UP),  # new -> resolved (C)
        row(PRESENCE, "B"),  # Both cases: its own inverse
    ]


def perfect(rows):
    return [r["answer"] for r in rows], [swapped_row(r)["answer"] for r in rows]


def test_an_image_reader_is_consistent_and_order_dependent():
    rows = eligible_rows()
    result = swap_consistency(rows, *perfect(rows))
    assert result["questions"] == 6 and result["skipped"] == 0
    assert result["consistency"]["rate"] == 1.0 and result["both_orders_correct"]["rate"] == 1.0
    assert result["order_dependent"]["rate"] == 1.0 and result["order_dependent"]["questions"] == 5
    assert result["order_dependent_rows"] == [0, 1, 2, 3, 4] and result["rows"] == list(range(6))
    assert result["accuracy"]["rate"] == result["accuracy_swapped"]["rate"] == 1.0
    low, high = result["order_dependent"]["ci95"]
    assert low < 1.0 == high
    assert set(result["by_dimension"]) == {"presence", "size", "margins", "change"}
    assert "clustered" not in result["order_dependent"]


def test_an_order_blind_answer_is_not_order_dependent():
    rows = eligible_rows()
    right, _ = perfect(rows)
    same = swap_consistency(rows, right, right)  # the same letter for both orders
    assert same["order_dependent"]["rate"] == 0.0 and same["order_dependent"]["hits"] == 0
    assert same["consistency"]["rate"] == pytest.approx(1 / 6)  # only where the truth is symmetric
    assert same["accuracy"]["rate"] == 1.0 and same["both_orders_correct"]["rate"] == pytest.approx(1 / 6)
    # a constant "Both cases" is perfectly consistent on presence questions, yet tells nothing apart
    presence = [row(PRESENCE, "C") for _ in range(5)]  # Case A only
    both = swap_consistency(presence, ["B"] * 5, ["B"] * 5)
    assert both["consistency"]["rate"] == 1.0 and both["order_dependent"]["rate"] == 0.0
    assert both["both_orders_correct"]["rate"] == 0.0
    wrong_way = swap_consistency(presence, ["A"] * 5, ["C"] * 5)  # consistent, each time wrong
    assert wrong_way["order_dependent"]["rate"] == 1.0 and wrong_way["both_orders_correct"]["rate"] == 0.0


def test_the_four_protocols_and_inversion_aware_scoring():
    """TILA's protocols for the VLM: a confident wrong first reading is overruled by a confident
    right swapped one when the two are fused; consistency needs both orders right."""
    question = row(PRESENCE, "C")  # Case A only; swapped: Case B only (D)
    options = question["options"]
    truth, inverse = options.index("Case A only"), options.index("Case B only")
    # first order: unsure, leaning "Both cases"; swapped order: sure of "Case B only"
    first = [0.0] * len(options)
    first[options.index("Both cases")], first[truth] = 1.0, 0.8
    second = [0.0] * len(options)
    second[inverse] = 4.0
    predicted, predicted_swapped = LETTERS[options.index("Both cases")], LETTERS[inverse]
    result = swap_consistency([question], [predicted], [predicted_swapped], scores=[first], scores_swapped=[second])
    protocols = result["protocols"]
    assert list(protocols) == ["standard", "reversed", "combined", "consistency"]
    assert protocols["standard"]["rate"] == 0.0 and protocols["reversed"]["rate"] == 1.0
    assert protocols["combined"]["rate"] == 1.0 and protocols["consistency"]["rate"] == 0.0
    assert combined_letter(question, first, second) == "C"
    # the fused choice of the swapped pair is the inverse of the fused choice of the pair
    assert combined_letter(swapped_row(question), second, first) == LETTERS[inverse]
    # without scores the combined protocol is left out, the other three stay
    assert list(swap_consistency([question], [predicted], [predicted_swapped])["protocols"]) == [
        "standard",
        "reversed",
        "consistency",
    ]


def test_rows_without_an_inverse_or_a_prediction_are_skipped_and_lengths_checked():
    rows = [*eligible_rows(), row(SIZE, "C", "size"), row(PRESENCE, "C")]
    predicted, swapped = perfect(rows[:6])
    result = swap_consistency(rows, [*predicted, "A", None], [*swapped, "A", None])
    assert result["questions"] == 6 and result["skipped"] == 2 and result["consistency"]["rate"] == 1.0
    consistent_but_absent = swap_consistency([row(SIZE, "B", "size")], ["C"], ["C"])  # "Absent" has no inverse
    assert consistent_but_absent["consistency"]["rate"] == 0.0
    with pytest.raises(ValueError, match="rows"):
        swap_consistency(rows, predicted, swapped)


def test_clustered_headline_and_comparing_two_systems():
    studies = {f"S{i}": SimpleNamespace(patient_id=f"P{i // 2}", modality="chest_xray") for i in range(8)}
    pairs = [("S0", "S1"), ("S2", "S3"), ("S4", "S5"), ("S6", "S7")] * 3
    rows = [row(PRESENCE, "CA"[i % 2], a=a, b=b) for i, (a, b) in enumerate(pairs)]
    reader = swap_consistency(rows, *perfect(rows), studies)
    blind = swap_consistency(rows, ["B"] * len(rows), ["B"] * len(rows), studies)
    assert reader["order_dependent"]["clustered"]["clusters"] == 4
    assert reader["order_dependent"]["clustered"]["mean"] == 1.0 and reader["clusters"][:4] == ["P0", "P1", "P2", "P3"]
    comparison = swap_comparison(reader, blind)
    assert comparison["difference"] == 1.0 and comparison["questions"] == 12
    assert comparison["mcnemar"]["b"] == 12 and comparison["clustered"]["clusters"] == 4
    assert comparison["clustered"]["difference"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="different rows"):
        swap_comparison(reader, swap_consistency(rows[:3], *perfect(rows[:3])))
    anonymous = {key: SimpleNamespace(modality="chest_xray") for key in studies}
    assert "clustered" not in swap_consistency(rows, *perfect(rows), anonymous)["order_dependent"]


# ---- a real (randomly initialised, tiny) VLM


@pytest.fixture(scope="module")
def processor():
    from transformers import AutoTokenizer

    from medreco.factory import bundled_text_encoder_path
    from medreco.processing import MedReCoImageProcessor, MedReCoProcessor

    tokenizer = AutoTokenizer.from_pretrained(bundled_text_encoder_path())
    return MedReCoProcessor(
        MedReCoImageProcessor(recipes={"chest_xray": {"size": [1, 40, 40]}}), tokenizer, patch_size=10
    )


def random_vlm(processor, blind: bool):
    import torch

    import medreco

    torch.manual_seed(0)
    text_config = {**medreco.PRESETS["tiny"]["vlm"]["text_config"], "vocab_size": len(processor.tokenizer)}
    return medreco.create_model(
        "vlm", "tiny", image_token_id=processor.image_token_id, text_config=text_config, blind_images=blind
    ).eval()


def test_evaluate_swap_consistency_with_a_tiny_vlm(processor):
    """A blind VLM sees the same prompt in both orders, so it answers both alike and is never order
    dependent; a seeing VLM's letters are those `closed_predictions` gives the swapped rows."""
    from medreco.evaluation.vqa import closed_predictions

    rng = np.random.default_rng(0)
    studies = {
        f"S{i}": SimpleNamespace(image=rng.random((40, 40)), modality="chest_xray", patient_id=f"P{i}")
        for i in range(4)
    }
    rows = [
        row(PRESENCE, "C", a="S0", b="S1"),
        row(SIZE, "D", "size", a="S2", b="S3"),
        row(CHANGE, "C", "change", FOLLOW_UP, a="S1", b="S2"),
        row(SIZE, "C", "size", a="S0", b="S3"),  # "Absent in Case B": no swapped twin
    ]
    blind = evaluate_swap_consistency(random_vlm(processor, blind=True), processor, rows, studies)
    assert blind["questions"] == 3 and blind["skipped"] == 1 and blind["scoring"] == "answer"
    assert blind["predicted"][3] is None and blind["predicted"][:3] == blind["predicted_swapped"][:3]
    assert all(letter in "ABCD" for letter in blind["predicted"][:3])
    assert blind["order_dependent"]["rate"] == 0.0 and "clustered" in blind["order_dependent"]
    seeing_model = random_vlm(processor, blind=False)
    seeing = evaluate_swap_consistency(seeing_model, processor, rows, studies, scoring="letter")
    twins = [swapped_row(r) for r in rows[:3]]
    assert seeing["predicted_swapped"][:3] == closed_predictions(seeing_model, processor, twins, studies)["letter"]
    recomputed = swap_consistency(rows, seeing["predicted"], seeing["predicted_swapped"], studies)
    assert seeing["order_dependent"] == recomputed["order_dependent"]
    assert swap_comparison(seeing, blind)["questions"] == 3
    # letters of an earlier closed evaluation stand for the first order: the same result
    answered = closed_predictions(seeing_model, processor, rows, studies, scorings=("letter",))["letter"]
    reused = evaluate_swap_consistency(seeing_model, processor, rows, studies, scoring="letter", answered=answered)
    assert reused["predicted"] == seeing["predicted"] and reused["order_dependent"] == seeing["order_dependent"]
    # with the first order's option scores, the combined protocol too, from the same letters
    from medreco.evaluation import closed_option_scores

    scored = closed_option_scores(seeing_model, processor, rows, studies, scorings=("letter",))["letter"]
    fused = evaluate_swap_consistency(
        seeing_model, processor, rows, studies, scoring="letter", answered=answered, answered_scores=scored
    )
    assert fused["order_dependent"] == seeing["order_dependent"] and "combined" in fused["protocols"]
    assert seeing["protocols"]["combined"] == fused["protocols"]["combined"]  # scored in both orders itself
    with pytest.raises(ValueError, match="3 answers given for 4 rows"):
        evaluate_swap_consistency(seeing_model, processor, rows, studies, answered=answered[:3])
