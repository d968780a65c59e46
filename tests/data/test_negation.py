"""Report variants about one finding (CLIP-clinic's hard negatives, CXR-Align's tasks) from decomposed
statements: the denial worded as the archive words it, the finding's sentences removed, never a
sentence that carries a second finding."""

import random

from medreco.data.reports.negation import NegationPhrasebook, report_variants, without_sentences

EFFUSION = "cxr/abnormal/pleural-effusion@pleura"
CARDIO = "cxr/abnormal/cardiac-chamber-enlargement@cardiac-chambers"
PNEUMOTHORAX = "cxr/abnormal/pneumothorax@pleura"
PLEURA = "cxr/anatomy/pleura"


def statement(status, *sentences):
    return {"status": status, "sentences": list(sentences)}


TRAINING = [
    {EFFUSION: statement("negative", "No pleural effusion."), CARDIO: statement("negative", "Heart size is normal.")},
    {EFFUSION: statement("negative", "No pleural effusion."), CARDIO: statement("positive", "The heart is enlarged.")},
    {EFFUSION: statement("negative", "No new pleural effusion.")},
    {EFFUSION: statement("negative", "No new pleural effusion.")},
    {EFFUSION: statement("negative", "No new pleural effusion.")},
    {EFFUSION: statement("positive", "Small left pleural effusion.")},
]


def test_the_phrasebook_denies_in_the_archives_most_frequent_words_that_need_no_prior():
    book = NegationPhrasebook.from_statements(TRAINING)
    # "No new pleural effusion." is more frequent, but reads only against a prior
    assert book.denial(EFFUSION) == "No pleural effusion."
    assert book.denial(CARDIO) == "Heart size is normal."
    assert book.denial(PNEUMOTHORAX) is None  # never denied in these reports
    assert book.assertions[EFFUSION] == ["Small left pleural effusion."]
    assert PLEURA in book.anatomy and EFFUSION not in book.anatomy


def test_a_statement_flips_to_its_denial_or_to_an_assertion_of_the_same_finding():
    book = NegationPhrasebook.from_statements(TRAINING)
    rng = random.Random(0)
    assert book.flipped(CARDIO, statement("positive", "Severe cardiomegaly."), rng) == "Heart size is normal."
    assert book.flipped(CARDIO, statement("uncertain", "Possible cardiomegaly."), rng) == "Heart size is normal."
    assert book.flipped(EFFUSION, statement("negative", "No effusion."), rng) == "Small left pleural effusion."
    assert book.flipped(PNEUMOTHORAX, statement("positive", "Small pneumothorax."), rng) is None


REPORT = (
    "FINDINGS:\nSmall left pleural effusion. The heart is enlarged. No pneumothorax.\n\n"
    "IMPRESSION:\nSmall left pleural effusion."
)
STATEMENTS = {
    EFFUSION: statement("positive", "Small left pleural effusion."),
    PLEURA: statement("positive", "Small left pleural effusion."),  # the structure shares the sentence
    CARDIO: statement("positive", "The heart is enlarged."),
    PNEUMOTHORAX: statement("negative", "No pneumothorax."),
}


def test_variants_remove_every_occurrence_of_the_findings_sentences_and_deny_it():
    book = NegationPhrasebook.from_statements(TRAINING)
    variants = report_variants(REPORT, STATEMENTS, book, random.Random(0), entities=[EFFUSION])
    assert variants.entity == EFFUSION
    assert "effusion" not in variants.omitted and "The heart is enlarged." in variants.omitted
    assert variants.omitted.startswith("FINDINGS:\n") and "IMPRESSION:" in variants.omitted
    assert variants.negated.count("No pleural effusion.") == 1
    assert variants.negated.replace("No pleural effusion.", "").split() == variants.omitted.split()
    # the denial lands at the start, the middle or the end, by the generator
    places = set()
    for seed in range(30):
        negated = report_variants(REPORT, STATEMENTS, book, random.Random(seed), entities=[EFFUSION]).negated
        places.add(
            "start" if negated.startswith("No pleural") else "end" if negated.endswith("effusion.") else "middle"
        )
    assert places == {"start", "middle", "end"}


def test_only_deniable_findings_with_sentences_of_their_own_are_rewritten():
    book = NegationPhrasebook.from_statements(TRAINING)
    shared = {
        EFFUSION: statement("positive", "Effusion and cardiomegaly."),
        CARDIO: statement("positive", "Effusion and cardiomegaly."),
    }
    assert report_variants("Effusion and cardiomegaly.", shared, book, random.Random(0)) is None
    normal = {EFFUSION: statement("negative", "No pleural effusion.")}
    assert report_variants("No pleural effusion.", normal, book, random.Random(0)) is None
    never_denied = {PNEUMOTHORAX: statement("positive", "Small pneumothorax.")}
    assert report_variants("Small pneumothorax.", never_denied, book, random.Random(0)) is None
    chosen = {report_variants(REPORT, STATEMENTS, book, random.Random(s)).entity for s in range(20)}
    assert chosen == {EFFUSION, CARDIO}  # never the anatomy entry, never the negative statement


def test_without_sentences_refuses_a_sentence_the_report_lacks():
    assert without_sentences("A. B. C.", ["B."]) == "A. C."
    assert without_sentences("A. B.", ["D."]) is None
