"""NegEx-style scopes: the status the triggers around a mention give it within its clause. The
triggers come from the lexicon; the grammar here bounds their reach (clause breaks, a pre-trigger's
window of words, the list a mention heads, alternatives, modifier phrases) and blanks the phrases
that only look like triggers."""

from __future__ import annotations

import re
from typing import NamedTuple

from .lexicon import (
    ABNORMAL_CUES,
    CLAUSE_BREAKS,
    EXCEPTIONS,
    NEGATIVE_ADJACENT,
    NEGATIVE_NEXT,
    NEGATIVE_POST,
    NEGATIVE_PRE,
    PSEUDO,
    STRUCTURE_NEGATIVE_ADJACENT,
    UNCERTAIN_NEXT,
    UNCERTAIN_POST,
    UNCERTAIN_PRE,
    alternation,
    trigger_pattern,
)
from .mentions import INVERTED, PREDICATE, Mention
from .ontology import Entity
from .statement import MentionStatus

EXCEPTION = alternation(EXCEPTIONS)  # "apart from", "except for": a clause ends at one
# Where a trigger's scope ends: the clause (the lexicon's clause breaks, and punctuation).
CLAUSE_BREAK = re.compile(
    rf"\b(?:{EXCEPTION}|{'|'.join(CLAUSE_BREAKS)})\b|[;)]|\((?!\s*(?:e\.?g|i\.?e|such as|for example)\b)|"
    r"(?<!\bvs)(?<!\bv)(?<!\be\.g)(?<!\bi\.e)(?<!\bapprox)(?<!\bincl)(?<!\bcf)(?<!\bdr)(?<!\bno)(?<!\bfig)\.(?=\s)|"
    r"(?<=,)\s*(?=there (?:is|are)\b)|,\s*with\b|(?<!\d)\s[-\u2013\u2014]\s(?!\d)",
    re.I,
)
_PSEUDO = trigger_pattern(PSEUDO)
_UNCERTAIN_PRE, _UNCERTAIN_POST = trigger_pattern(UNCERTAIN_PRE), trigger_pattern(UNCERTAIN_POST)
_UNCERTAIN_NEXT = trigger_pattern(UNCERTAIN_NEXT)
_NEGATIVE_PRE, _NEGATIVE_POST = trigger_pattern(NEGATIVE_PRE), trigger_pattern(NEGATIVE_POST)
_NEGATIVE_ADJACENT = trigger_pattern(NEGATIVE_ADJACENT)
_STRUCTURE_NEGATIVE_ADJACENT = trigger_pattern(NEGATIVE_ADJACENT + STRUCTURE_NEGATIVE_ADJACENT)
_NEGATIVE_NEXT = trigger_pattern(NEGATIVE_NEXT)
# An anatomical structure is abnormal only when the text says how; mentioned plainly it is normal.
ABNORMAL_CUE = re.compile(rf"(?<!non-)(?<!non)\b(?:{'|'.join(ABNORMAL_CUES)})\b", re.I)
OTHER_MENTION = "\u00a7"  # stands for another entity's mention inside a trigger's window
_TRIGGER_WORD = re.compile(
    r"not|no|nor|without|possibl[ey]|probabl[ey]|likely|unlikely|suspected|questionabl[ey]|is|are|was|were|be", re.I
)
# A comma before a new grammatical subject ends a pre-trigger's reach ("possibly a node, the lungs are clear").
_NEW_SUBJECT = re.compile(r",\s+(?=(?:the|there|an?)\b)", re.I)
# After a negation, "and" (or a comma) before an article, a size or a grade starts a new, positive item
# ("no portal vein thrombosis and moderate ascites"); in a list of possibilities it does not.
_NEW_ITEM = re.compile(
    r"(?:,\s*|\s+)(?:and|but)\s+(?=(?:the|there|an?|\d[\d.]*\s*(?:mm|cm)|mild|moderate|"
    r"small|large|minor|trace|minimal|severe|marked|extensive|new|multiple|several|scattered|stable|persistent)\b)|"
    r",\s+(?=(?:\d[\d.]*\s*(?:mm|cm)|mild|moderate|minor|trace|minimal|severe|marked|extensive|stable|persistent|"
    r"unchanged)\b)",
    re.I,
)


def _last_trigger_negates(text: str) -> bool:
    """Whether the last pre-trigger in a text is a negation (not a possibility)."""
    negations = [m.end() for m in _NEGATIVE_PRE.finditer(text)]
    possibilities = [m.end() for m in _UNCERTAIN_PRE.finditer(text)]
    return bool(negations) and max(negations) > max(possibilities, default=-1)


# ", and" followed by a new description (not the next item of a negated list) also ends a scope.
_AND_CLAUSE = re.compile(r",\s*and\b", re.I)
# "and X is tracking ...": after a negated item, a mention with a verb of its own starts a new clause
_AND_BEFORE = re.compile(r"\band\s+(?:(?:the|an?)\s+)?(?:[\w-]+\s+){0,2}$", re.I)  # searched in `before + " "`
# a state said with a verb or a participle ("CBD dilated", "is enlarged"), not a noun ("midline shift")
_STATED = re.compile(r"\b(?:is|are|was|were|appears?|remains?)\b|\w+ed$", re.I)
_COMMA_ONLY = re.compile(r"\s*,\s*(?:the\s+)?$", re.I)  # between a listed finding and a stated state's subject
_OWN_PREDICATE = re.compile(
    r"^\s*(?:is|are|was|were|has|have)\s+(?:(?:now|also|again|still)\s+)?"
    r"(?!(?:not|no|seen|identified|present|noted|demonstrated|evident|detected|visuali[sz]ed|appreciated|excluded|"
    r"shown|suspected|found)\b)[a-z]+(?:ing|ed)\b",
    re.I,
)

# Words that open a modifier phrase, not a listed mention's own modifiers ("post CABG [with intact]
# sternotomy wires, cardiac size is normal": the verdict is the heart's alone).
_PREPOSITIONS = frozenset({"with", "in", "of", "at", "on", "from", "to", "for", "after", "following", "within", "into"})
_SINGULAR_VERB = re.compile(r"(?:is|was|has)\b", re.I)
# A verdict standing alone after a comma ("heart size, normal"), not a measure ("normal calibre").
_BARE_VERDICT = re.compile(
    r"\s*,\s*(?:[a-z]+\s+){0,2}?(?:normal|unremarkable|clear|negative)(?:\s+(?:size|in size|sized))?\s*(?:[.;,]|$)",
    re.I,
)
# A density that may not be there at all ("a nodule over the fifth rib could be a nipple shadow").
_MAYBE_NOT_THERE = re.compile(
    r"[^;.]{0,60}?\b(?:may|could|might) (?:\w+ )?(?:be|represent|reflect) (?:a |the )?(?:\w+ )?nipple shadows?", re.I
)
# "a liver lesion: haemangioma most likely, but ...": the likeliest of the possibilities, still one
# (not "opacity, most likely pneumonia", where the hedge is pneumonia's)
_LIKELIEST_AFTER = re.compile(r"\s+(?:(?:is|are)\s+)?(?:most|more|very)\s+likely\s*(?:[,;.)]|$)", re.I)
# A cue introducing a possibility: after a negation ("no X to suggest Y"), the possibility is denied.
_SUGGESTION = re.compile(r"^(?:to suggest|suggestive of|suggests?|suggesting|to indicate|indicative of)$", re.I)
# Right after a mention, its removal: "craniotomy and meningioma resection" (the meningioma is gone).
_REMOVED_NEXT = re.compile(r"(?:resection|excision|extirpation)\b(?!\s+(?:cavity|bed|margin|site))", re.I)
_NEGATION_BEFORE = re.compile(r"\b(?:no|not|without|non|negative for|free of|nor)\W+(?:\w+\W+){0,2}$", re.I)
_LIST_WORDS = {OTHER_MENTION, "", "or", "and", "nor"}
# Findings offered as alternatives: "A or B", "either A or B", "A, B, or C" (a negation or hedge, when
# there is one, decides); what follows a mention, and what precedes one, with other mentions as marks.
_FILLER = (
    r"(?:(?:an?|the)\s+)?(?:(?!(?:without|with|and|or|nor|no|not|may|might|could|can|represents?|reflects?|is|are|"
    r"was|were|be|includ\w*|suggest\w*|possibly|likely|probably|due|in|of|to|for|from|at|on)\b)[\w-]+\s+){0,2}"
)
# an item of such a list: another mention, or a word the vocabulary lacks ("hypoalbuminaemia")
_LISTED = rf"(?:{OTHER_MENTION}|(?!(?:or|and|nor)\b)[a-z-]+\b)"
_ALTERNATIVE_AFTER = re.compile(
    rf"(?:\s*,\s*{_FILLER}{_LISTED})*\s*,?\s*(?<![\w-])(?:and/)?or\s+(?:possibly\s+)?{_FILLER}{_LISTED}", re.I
)
_ALTERNATIVE_BEFORE = re.compile(
    rf"{OTHER_MENTION}(?:\s*,\s*{_FILLER}{_LISTED})*\s*,?\s*(?<![\w-])(?:and/)?or\s+(?:possibly\s+)?{_FILLER}$", re.I
)
# "Differential for <subject> includes A, B": the subject is what was seen, the list is uncertain.
_DIFFERENTIAL_FOR = re.compile(
    r"\b(?:differential(?: diagnos[ie]s| considerations?)?|ddx|(?:diagnostic )?considerations|possibilities)\s+"
    r"(?:for|of)\s+(?:[^.;:]|\.(?=\d)){1,120}?\s+(?P<verb>(?:would )?includes?|are|is)\b",
    re.I,
)

# A phrase modifying the mention before it ("the oedema surrounding the metastasis"): a verb after
# the phrase is about that subject, not about the finding inside the phrase.
_MODIFIERS = (
    r"(?:surrounding|around|adjacent to|near|abutting|involving|within|in|at|from|along|associated with|"
    r"related to|at the site of|of|on|arising from|underlying|(?:seen |noted |present )?(?:after|following))"
)
_MODIFIER_WORDS = (
    r"(?:(?!(?:is|are|was|were|has|have|had|may|might|could|can|represents?|reflects?|suggest\w*|likely|possibly|"
    r"probably|not|no|and|or|nor|with|without)\b)[\w'/.-]+\s+){0,4}"
)
_MODIFIER_PHRASE = re.compile(rf"^\s*{_MODIFIERS}\s+{_MODIFIER_WORDS}{OTHER_MENTION}", re.I)
_IN_MODIFIER = re.compile(rf"{OTHER_MENTION}\s+{_MODIFIERS}\s+{_MODIFIER_WORDS}$", re.I)
# A structure named as a place: "(lesion) in the trachea or main bronchi".
_PLACE_BEFORE = re.compile(r"\b(?:in|of|at|within|into|from|along|involving|throughout)\s+(?:the\s+|both\s+)?$", re.I)
# A finding named as where a negated one would be: "no enhancing component within the renal cyst".
_WHERE_THE_OTHER_IS = re.compile(
    rf"\b(?:no|without)\s+(?:(?:(?:[\w-]+|{OTHER_MENTION})\s+){{0,8}}{OTHER_MENTION}[^{OTHER_MENTION}]{{0,40}}?\b(?:within|inside|in|of)|"
    rf"(?:[\w-]+\s+){{1,3}}(?:within|inside|in))\s+"
    rf"(?:the|this|that|its)\s+(?:(?!(?:no|not|without|nor|or|and)\b)[\w.-]+\s+){{0,4}}$",
    re.I,
)

# After a mention, a comma opening a new description ends its post-triggers' reach
# ("a granuloma in the right upper lobe, the lung is otherwise normal").
_NEW_DESCRIPTION = re.compile(r",\s+(?=(?:the|a|an|there|with|otherwise|and the|but|both|all|each)\b)", re.I)


def abnormal_words(text: str) -> bool:
    """Whether a text says how something is abnormal: an ABNORMAL_CUE word not negated by one of the
    three words before it ("not enlarged by size criteria", "no aggressive lesion" say nothing)."""
    return any(
        not _NEGATION_BEFORE.search(text[max(0, match.start() - 60) : match.start()])
        for match in ABNORMAL_CUE.finditer(text)
    )


def _mask_pseudo(match: re.Match, start: int, end: int, sentence: str) -> str:
    """A pseudo-trigger blanked, unless it is part of the mention ("no [enlargement of the spleen]");
    a "no" heading a list keeps negating the rest of it ("No [interval growth] or new lesion")."""
    if match.start() < end and start < match.end():
        return match.group()
    text = match.group()
    if re.match(r"no\s", text, re.I) and re.match(r"\s*(?:,|or\b|nor\b)", sentence[match.end() :]):
        return text[:2] + " " * (len(text) - 2)
    return " " * len(text)


def _mask_differential_subjects(masked: str) -> str:
    """Blank "differential for <subject>" so that only the verb ("includes"), written as the trigger
    "ddx", stands before the listed alternatives."""
    for match in _DIFFERENTIAL_FOR.finditer(masked):
        verb_start = match.start("verb")
        trigger = "ddx".ljust(match.end() - verb_start)
        masked = masked[: match.start()] + " " * (verb_start - match.start()) + trigger + masked[match.end() :]
    return masked


def _triggers(pattern: re.Pattern, text: str, kind: str) -> list[tuple[int, int, str, str]]:
    return [(m.start(), m.end(), kind, m.group()) for m in pattern.finditer(text)]


class Scope(NamedTuple):
    """Where a mention's triggers stand: the sentence with pseudo-triggers blanked (`masked`), the
    mention's clause (`clause_start`, `clause_end`), and the words before the mention that a
    pre-trigger may stand in (`before`)."""

    masked: str
    clause_start: int
    clause_end: int
    before: str


def scope_of(sentence: str, start: int, end: int, marks, window: int) -> Scope:
    """The scope of the mention at (start, end); `marks`, the other mentions, do not use up the window."""
    # a pseudo-trigger that is part of the mention is no pseudo-trigger ("no [enlargement of the spleen]")
    masked = _PSEUDO.sub(lambda m: _mask_pseudo(m, start, end, sentence), sentence)
    masked = _mask_differential_subjects(masked)
    # the whole sentence is searched: a break's look-ahead may reach into the mention ("after [ureteric
    # stent] placement")
    clause_start = max([m.end() for m in CLAUSE_BREAK.finditer(masked) if m.end() <= start], default=0)
    following = CLAUSE_BREAK.search(masked, end)
    clause_end = following.start() if following else len(masked)
    return Scope(masked, clause_start, clause_end, window_before(masked, clause_start, start, marks, window))


def scope_status(
    scope: Scope, start: int, end: int, marks, entity: Entity | None, own: Mention | None, window: int
) -> MentionStatus:
    """The status the triggers in its scope give a mention: the pre-trigger nearest it (`status_before`),
    else the post-triggers (`post_status`); a finding offered as one of alternatives is uncertain.
    `own`: the mention's own reading, when it has one (a stated state, a normal state)."""
    masked, clause_start, clause_end, before = scope
    structure = entity is not None and entity.level == "anatomy"
    status = status_before(scope, start, end, marks, structure, own, window)
    if status is None:
        # "the oedema surrounding the metastasis has cleared": the verb is about the subject only
        in_modifier = entity is not None and not structure and _IN_MODIFIER.search(before + " ")
        # a normal state is the predicate itself: what follows it is about other things
        stated = in_modifier or (own is not None and own.how == INVERTED)
        placed = structure and _PLACE_BEFORE.search(masked[clause_start:start]) is not None
        status = MentionStatus.POSITIVE if stated else post_status(masked, end, clause_end, marks, structure, placed)
    alternative = _ALTERNATIVE_BEFORE.search(before + " ")  # "either a bulla or a pneumothorax"
    if status is MentionStatus.POSITIVE and entity is not None and entity.level != "anatomy" and alternative:
        return MentionStatus.UNCERTAIN
    return status


def status_before(
    scope: Scope, start: int, end: int, marks, structure: bool, own: Mention | None, window: int
) -> MentionStatus | None:
    """The status the pre-trigger nearest the mention gives (`pre_status`), or None. A negation does
    not reach a mention with a verb of its own after "and", nor a state said of a subject listed after
    another finding and a comma; a finding named as where a negated one would be is there."""
    masked, clause_start, _, before = scope
    status = pre_status(before, masked[clause_start:start], structure)
    if status is MentionStatus.NEGATIVE and _AND_BEFORE.search(before + " ") and _OWN_PREDICATE.match(masked[end:]):
        status = None  # "no free gas and haemoperitoneum is tracking around the spleen": a new clause
    if status is MentionStatus.NEGATIVE and own is not None and own.how == PREDICATE:
        # "No gallstones, CBD dilated to 9 mm": a state said of a subject listed after another finding
        # and a comma is a clause of its own
        listed = [m for m in marks if clause_start <= m[0] and m[1] <= own.subject]
        own_words = masked[own.subject : start]  # "CBD [not] dilated" negates itself
        if (
            listed
            and _COMMA_ONLY.match(masked[max(m[1] for m in listed) : own.subject])
            and _STATED.search(masked[own.subject : end])  # a verb, not a noun ("no mass, midline shift")
            and pre_status(own_words, own_words, structure) is None
        ):
            status = None
    if status is MentionStatus.NEGATIVE and not structure:
        wide = window_before(masked, clause_start, start, marks, 2 * window)
        if _WHERE_THE_OTHER_IS.search(wide + " "):
            status = MentionStatus.POSITIVE  # "no fat within the nodule": the nodule is there
    return status


def window_before(masked: str, clause_start: int, start: int, mentions, window: int) -> str:
    """The words before a mention that a pre-trigger may stand in: back to the clause start, at most
    `window` words that are not other mentions, and not past ", and" that opens a new description."""
    text = masked[clause_start:start]
    for other_start, other_end, _ in sorted(mentions, key=lambda m: -m[0]):
        if clause_start <= other_start and other_end <= start:
            local = other_start - clause_start, other_end - clause_start
            text = text[: local[0]] + f" {OTHER_MENTION} " + text[local[1] :]
    new_subject = list(_NEW_SUBJECT.finditer(text))
    if new_subject:  # "favoured to be a lymph node, the lungs are clear"
        text = text[new_subject[-1].end() :]
    new_item = list(_NEW_ITEM.finditer(text))
    if new_item and _last_trigger_negates(text[: new_item[-1].start()]):
        text = text[new_item[-1].end() :]
    for match in reversed(list(_AND_CLAUSE.finditer(text))):
        following = [w for w in text[match.end() :].split() if w != OTHER_MENTION]
        if len(following) >= 2:
            text = text[match.end() :]
            break
    words, kept = text.split(), 0
    for index in range(len(words) - 1, -1, -1):
        if words[index] != OTHER_MENTION and words[index].strip(",") not in ("or", "and", "nor", ""):
            kept += 1
        if kept > window:
            return " ".join(words[index + 1 :])
    return " ".join(words)


def post_status(
    masked: str, end: int, clause_end: int, mentions, structure: bool = False, placed: bool = False
) -> MentionStatus:
    """The status post-triggers give: those right after the mention, or after the rest of a list
    the mention starts ("effusion or pneumothorax is not seen"). `placed`: a structure named as a
    place ("in the trachea or main bronchi"), whose "or" lists places, not alternatives."""
    text = masked[end:clause_end]
    if _MAYBE_NOT_THERE.match(text):
        return MentionStatus.UNCERTAIN
    for other_start, other_end, other in sorted(mentions, key=lambda m: -m[0]):
        # locations ("in the right thyroid lobe") stay words: "the cyst in the liver is not seen"
        if end <= other_start and other_end <= clause_end and other.level != "anatomy":
            text = text[: other_start - end] + f" {OTHER_MENTION} " + text[other_end - end :]
    text = _NEW_DESCRIPTION.split(text, maxsplit=1)[0]
    text = _MODIFIER_PHRASE.sub("", text, count=1)  # "the oedema [surrounding the metastasis] has cleared"
    immediate = text.split(OTHER_MENTION)[0]
    words = text.split()
    joined = False  # a list joined by "and"/"or" shares its verdict; "X, Y is normal" is Y's alone
    while words:
        if words[0] == OTHER_MENTION or words[0].strip(",/") in ("", "or", "and", "nor"):
            joined = joined or words[0].strip(",/") in ("or", "and", "nor") or words[0] == "/"
            words.pop(0)
        elif OTHER_MENTION in words[1:3] and all(
            w.isalpha() and not _TRIGGER_WORD.fullmatch(w) and w.lower() not in _PREPOSITIONS
            for w in words[: words.index(OTHER_MENTION)]
        ):
            del words[: words.index(OTHER_MENTION)]  # a listed mention's own modifiers ("atypical")
        else:
            break
    listed = " ".join(words).split(OTHER_MENTION)[0]
    if not joined and _SINGULAR_VERB.match(listed):
        listed = ""
    # a verdict after a comma is a structure's, or a bare one ("heart size, normal"), not a
    # structure's measure after a finding ("Aorta: calcified plaque, normal calibre")
    verdict_may_follow = structure or not immediate.lstrip().startswith(",") or _BARE_VERDICT.match(immediate)
    if (
        _UNCERTAIN_POST.search(immediate[:80])
        or _UNCERTAIN_NEXT.match(immediate.lstrip(" ,"))
        or _UNCERTAIN_NEXT.match(re.sub(r"^\s*[\w-]+\s+", "", immediate))  # "UIP pattern versus NSIP"
        or _UNCERTAIN_POST.search(listed[:80])
        or _LIKELIEST_AFTER.match(immediate)
    ):
        return MentionStatus.UNCERTAIN
    if (
        _NEGATIVE_POST.search(immediate[:80])
        or _NEGATIVE_POST.search(listed[:60])
        or (verdict_may_follow and _NEGATIVE_NEXT.match(immediate.lstrip(" ,:")))
        or _REMOVED_NEXT.match(immediate.lstrip())
        or (verdict_may_follow and _NEGATIVE_NEXT.match(listed))
    ):
        return MentionStatus.NEGATIVE
    # "a bulla or a loculated pneumothorax", "A, B or C"; not places ("in the trachea or main bronchi")
    if not placed and _ALTERNATIVE_AFTER.match(text):
        return MentionStatus.UNCERTAIN
    return MentionStatus.POSITIVE


def pre_status(before: str, clause_before: str, structure: bool = False) -> MentionStatus | None:
    """The status the trigger nearest the mention gives, or None without one. A suggestion cue
    nearest ("to suggest") is denied by a negation anywhere before it in the clause ("no loss of
    compressibility or intraluminal echoes to suggest DVT")."""
    real = [m.start() for m in re.finditer(r"\S+", before) if m.group().strip(",/") not in _LIST_WORDS]
    adjacent_from = real[-2] if len(real) >= 2 else 0
    adjacent = _STRUCTURE_NEGATIVE_ADJACENT if structure else _NEGATIVE_ADJACENT
    found = [
        *_triggers(_UNCERTAIN_PRE, before, "uncertain"),
        *_triggers(_NEGATIVE_PRE, before, "negative"),
        # right before the mention, not across a comma ("lungs clear, heart enlarged")
        *[t for t in _triggers(adjacent, before, "negative") if t[0] >= adjacent_from and "," not in before[t[1] :]],
    ]
    triggers: list[tuple[int, int, str, str]] = []
    for trigger in sorted(found, key=lambda t: t[0] - t[1]):  # overlapping triggers: the longer one
        if all(trigger[1] <= kept[0] or trigger[0] >= kept[1] for kept in triggers):
            triggers.append(trigger)
    triggers.sort(key=lambda t: (t[1], t[1] - t[0]))
    if not triggers:
        return None
    nearest = triggers[-1]
    if nearest[2] == "uncertain" and _SUGGESTION.match(nearest[3]):
        cue_at = clause_before.lower().rfind(nearest[3].lower())
        if any(t[2] == "negative" and t[1] <= nearest[0] for t in triggers) or (
            cue_at > 0 and _NEGATIVE_PRE.search(clause_before[:cue_at])
        ):
            return MentionStatus.NEGATIVE
    return MentionStatus.UNCERTAIN if nearest[2] == "uncertain" else MentionStatus.NEGATIVE


def sentence_status(sentence: str) -> MentionStatus:
    """The status a sentence gives whatever it mentions (for text already about one entity, such as
    an LLM's extraction that paraphrases the entity's name)."""
    masked = _PSEUDO.sub(lambda m: " " * len(m.group()), sentence)
    if any(pattern.search(masked) for pattern in (_UNCERTAIN_PRE, _UNCERTAIN_POST, _UNCERTAIN_NEXT)):
        return MentionStatus.UNCERTAIN
    if _NEGATIVE_PRE.search(masked) or _NEGATIVE_POST.search(masked):
        return MentionStatus.NEGATIVE
    return MentionStatus.POSITIVE


def opens_with_negation(text: str) -> bool:
    """Whether a text starts with a verdict of absence or normality ("clear.", "No nodules.")."""
    return _NEGATIVE_POST.match(text.strip()) is not None


__all__ = [
    "ABNORMAL_CUE",
    "CLAUSE_BREAK",
    "EXCEPTION",
    "OTHER_MENTION",
    "Scope",
    "abnormal_words",
    "opens_with_negation",
    "post_status",
    "pre_status",
    "scope_of",
    "scope_status",
    "sentence_status",
    "status_before",
    "window_before",
]
