"""Report decomposition: a report -> one statement per entity (mention status + the text about it).

The default backend is offline and rule-based: section parsing (findings and impression),
sentence splitting, entity matching by synonyms (longest match wins; the more specific entity wins
a tie), and NegEx-style negation and uncertainty scopes within each clause. Abnormal findings
also inform the statement of the anatomy they sit in."""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from ...errors import MedReCoError, UnknownEntityError
from .ontology import (
    MODALITY_REGION,
    Entity,
    Measurement,
    Ontology,
    description_patterns,
    measured_sizes,
    measurement_pattern,
    phrase_pattern,
)


class MentionStatus(str, Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    UNCERTAIN = "uncertain"
    NOT_MENTIONED = "not mentioned"


class EmptyReportError(MedReCoError, ValueError):
    """A report with no text to decompose."""


@dataclass
class EntityStatement:
    entity_id: str
    status: MentionStatus = MentionStatus.NOT_MENTIONED
    sentences: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The entity-specific text (empty when not mentioned)."""
        return " ".join(self.sentences)


@dataclass
class ReportDecomposition:
    family: str
    sections: dict[str, str]
    statements: dict[str, EntityStatement]

    def status(self, entity_id: str) -> MentionStatus:
        statement = self.statements.get(entity_id)
        return statement.status if statement else MentionStatus.NOT_MENTIONED

    def mentioned(self) -> dict[str, EntityStatement]:
        return {k: v for k, v in self.statements.items() if v.status is not MentionStatus.NOT_MENTIONED}


class ReportDecomposer(ABC):
    """One interface, several backends (rule-based offline; LLM-based)."""

    def __init__(self, ontology: Ontology | None = None):
        self.ontology = ontology or Ontology.load()

    @abstractmethod
    def decompose(self, report: str, modality: str, entities: list[Entity] | None = None) -> ReportDecomposition:
        """Statements for `entities` (default: every entity of the modality's family)."""


# ------------------------------------------------------------------------------- rule-based

# The headings reports use, by the section each names: what the current images show ("findings",
# "impression") is read; the request, the method and the prior ("indication", "technique",
# "comparison") are context, not findings. Several departments' words for each.
SECTION_NAMES = {
    "findings": ("findings", "finding", "report", "results?", "description", "observations?"),
    "impression": (
        "impressions?",
        "conclusions?",
        "opinion",
        "summary",
        "comments?",
        "interpretation",
        "assessment",
        "final impression",
        "impression and recommendations?",
    ),
    "examination": ("examination", "exam", "study", "procedure", "type of (?:exam|examination|study)"),
    "indication": (
        "indications?",
        "clinical indications?",
        "reason for (?:exam|examination|study|referral|request)",
        "clinical (?:history|information|details|notes|data|question|background)",
        "clinical",
        "history",
        "relevant history",
        "referral",
        "request",
    ),
    "technique": ("technique", "protocol", "sequences", "contrast", "dose", "radiation dose", "dlp"),
    "comparison": ("comparisons?", "priors?", "previous (?:studies|study|imaging)"),
    "recommendation": ("recommendations?", "advice", "follow-up"),
}
# The headings that also stand alone on a line, without a colon ("FINDINGS", "Impression"); a broad
# word ("Summary", "Report", "Contrast") is a heading only with its colon.
STANDALONE_SECTION_NAMES = (
    "findings",
    "impressions?",
    "conclusions?",
    "indications?",
    "history",
    "clinical history",
    "technique",
    "comparisons?",
    "examination",
)
_SECTION_OF = [(re.compile(rf"(?:{'|'.join(words)})$", re.I), name) for name, words in SECTION_NAMES.items()]
_ANY_SECTION = "|".join(word for words in SECTION_NAMES.values() for word in words)
# A heading starts a line and ends with a colon ("FINDINGS:", "Clinical details:"), or stands alone
# on its line in capitals or title case ("IMPRESSION", "Findings").
SECTION_HEADER = re.compile(
    rf"^[ \t]*((?i:{_ANY_SECTION}))[ \t]*:|^[ \t]*((?i:{'|'.join(STANDALONE_SECTION_NAMES)}))[ \t]*(?=\n|$)",
    re.MULTILINE,
)
READ_SECTIONS = ("findings", "impression")
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9_(])|\n\s*\n|\n\s*(?=\d+[.)]\s)|\n(?=[A-Z])")
# Phrases that set one thing apart ("apart from a nodule, the lungs are clear"): a clause ends at one,
# and a structure called normal beside one is normal but for what was named.
_EXCEPTION = r"(?:apart from|aside from|except(?: for)?|other than|save for|but for|with the exception of|besides)"
# Where a trigger's scope ends: the clause (NegEx "termination terms" among these).
CLAUSE_BREAK = re.compile(
    rf"\b(?:{_EXCEPTION}|but|however|although|though|yet|whereas|which|while|given|despite|nevertheless|"
    r"(?<!is )(?<!are )(?<!was )(?<!were )(?<!appears )(?<!appear )(?<!remains )(?<!remain )(?<!be )otherwise|"
    r"status post|s/p|(?<!seen )(?<!noted )(?<!identified )(?:following|after)"
    r"(?=\s+(?:the\s+|an?\s+|recent\s+|interval\s+|prior\s+)?(?:[\w-]+\s+){0,3}?"
    r"(?:placement|insertion|removal|repositioning|exchange|advancement|withdrawal|surgery|resection|procedure|"
    r"biopsy|drainage|thoracentesis|paracentesis|intubation|extubation|treatment|therapy|chemotherapy|"
    r"radiotherapy|radiation|emboli[sz]ation|ablation|repair|operation|stenting|stent|decompression|"
    r"[a-z]+ectomy|[a-z]+otomy|[a-z]+ostomy|[a-z]+plasty)\b)|"
    r"(?:cause|source|etiology|aetiology) (?:for|of)|reason for|to explain|"
    r"to account for|leaving|out of proportion to|"
    r"(?<!not )(?<!be )(?<!possibly )(?<!likely )(?<!probably )(?:consistent|compatible) with|"
    r"(?<!not )(?<!be )(?<!possibly )(?<!likely )(?<!probably )in keeping with|"
    r"there (?:is|are|has been|have been)|(?:and|but) only)\b|[;)]|\((?!\s*(?:e\.?g|i\.?e|such as|for example)\b)|"
    r"(?<!\bvs)(?<!\bv)(?<!\be\.g)(?<!\bi\.e)(?<!\bapprox)(?<!\bincl)(?<!\bcf)(?<!\bdr)(?<!\bno)(?<!\bfig)\.(?=\s)|"
    r"(?<=,)\s*(?=there (?:is|are)\b)|,\s*with\b|(?<!\d)\s[-\u2013\u2014]\s(?!\d)",
    re.I,
)
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

# Phrases that look like negation or uncertainty but are neither (NegEx "pseudo-triggers").
PSEUDO = [
    r"no (?:significant |interval |appreciable |substantial |further |suspicious |definite |acute |measurable |"
    r"discernible )*(?:change|changes|difference)",
    r"no evidence of (?:interval )?(?:change|progression|growth)",
    r"(?:is|are|has|have) not (?:been )?(?:significantly |substantially )?(?:changed|increased|improved|worse|"
    r"different|enlarged in size|larger|smaller|bigger)",
    r"not necessarily",
    r"not (?:certain|clear) (?:whether|if)",
    r"(?:with (?:and|or) )?without (?:iv |intravenous |oral )?contrast",
    r"(?:near(?:ly)?[- ]complete|partial|incomplete) resolution of",
    r"(?:has|have) (?:nearly|largely|partially|almost) resolved",
    r"(?:recommend|attempted|incomplete) removal of",
    r"not significantly changed",
    r"(?:no|without|not yet|incomplete) (?:\w+ )?(?:resolution|clearing|clearance|regression) of",
    r"without (?:significant |interval )?change",
    r"no (?:significant |interval |further |substantial )*(?:increase|decrease|enlargement|progression|growth)",
    r"not only",
    r"not unexpected",
    r"improved but not resolved",
    r"has not (?:resolved|changed|improved)",
    r"not (?:entirely |completely |fully )resolved",
    r"(?:does|do|did|has|have) not (?:appear to )?(?:have )?(?:resolved|cleared|regressed|changed)",
    r"not (?:seen|present|visible|identified|evident|apparent)(?: \w+)? (?:previously|before|on (?:the )?"
    r"(?:prior|previous|earlier|\d{4})\b[^,;)]*)",
    r"(?:is|are) not new",
    r"no (?:\w+ )?response",
    r"(?:with(?:out)? (?:and|or) )?with(?:out)? (?:iv |intravenous |oral )?(?:contrast|gadolinium|gad)",
    r"without (?:colou?r |spectral )?doppler",
    r"with or without",
]
UNCERTAIN_PRE = [
    r"possible",
    r"possibly",
    r"probable",
    r"probably",
    r"presumably",
    r"presumed",
    r"questionable",
    r"question of",
    r"suspicious for",
    r"suspected",
    r"suspicion (?:of|for)",
    r"concerning for",
    r"concern for",
    r"worrisome for",
    r"(?:raising|raises?|raised) (?:the )?(?:concern|question|possibility|suspicion) (?:for|of)",
    r"favou?r(?:s|ed|ing)?(?: to (?:represent|be|reflect))?",
    r"query",
    r"(?:may|could|might) have",
    r"perhaps",
    r"maybe",
    r"presumptive",
    r"potential(?:ly)?",
    r"(?:cannot|can ?not|can't|unable to|difficult to) (?:completely |entirely |totally )?(?:exclude|rule out)",
    r"(?:difficult to distinguish|indistinguishable|not distinguishable) from",
    r"suspect",
    r"(?:a )?suggestion of",
    r"(?:the )?possibility of",
    r"(?:felt|believed) to (?:represent|be)",
    r"doubt(?:ful)?",
    r"low (?:probability|likelihood) (?:for|of)",
    r"atypical for",
    r"concerned about",
    r"(?:a )?hint of",
    r"questionably",
    r"(?:to )?rule out",
    r"(?:may|could|might|can) (?:\w+ly )?(?:represent|reflect|be|indicate|relate|correspond)",
    r"(?:cannot|can ?not) (?:be )?(?:excluded?|ruled out)",
    r"can ?not (?:exclude|rule out)",
    r"(?:is |are )?not (?:entirely |completely |definitely )?(?:excluded|ruled out)",
    r"(?:(?:main|leading|principal|chief|other) )?differentials?(?: diagnos[ie]s| considerations?)?(?: would)?"
    r"(?: includes?| include| is| are)?",
    r"(?:clinical )?correlat\w+ (?:for|with)",
    r"(?:diagnostic )?(?:considerations?|possibilities) (?:would )?(?:includes?|are)",
    r"ddx",
    r"to suggest",
    r"suggestive of",
    r"suggests?",
    r"suggesting",
    r"to indicate",
    r"indicative of",
    r"likely",
    r"unlikely",
    r"versus",
    r"vs\.?",
    r"equivocal",
    r"borderline",
    r"cannot be (?:differentiated|distinguished) from",
    r"(?:to )?(?:evaluate|assess|look|search|screen) for",
    r"(?:assessment|evaluation) for",
    # "can be seen with sarcoidosis"; "emphysema is seen with apical bullae" says what is there
    r"(?:(?:can|may|could) be|(?:is |are )?(?:often|commonly|typically|frequently|classically)) seen (?:with|in)",
    r"attributable to",
    r"attributed to(?! (?:the patient's|known|his|her|their)\b)",
    r"thought to (?:represent|be)",
    r"consider",
    r"r/o",
]
UNCERTAIN_POST = [
    r"(?:cannot|can ?not) (?:be )?(?:entirely |completely )?(?:excluded|ruled out)",
    r"(?:is|are) not (?:entirely |completely )?(?:excluded|ruled out)",
    r"(?:is|are) (?:possible|suspected|questioned|questionable|not excluded)",
    r"(?:is|are) (?:possibly|probably|questionably|perhaps|likely) (?!an?\b|the\b|due|secondary|related|from|caused|"
    r"physiologic|benign|reactive|incidental|postoperative|post-?surgical|degenerative|chronic|old|normal|artefactual|"
    r"artifactual)\w+",
    r"(?:is|are) (?:likely|probable)(?! (?:an?|the|due|secondary|related|from|caused|because|physiologic|benign|"
    r"reactive|incidental|postoperative|post-?surgical|degenerative|chronic|old|normal|artefactual|artifactual))",
    r"(?:may|could|might) be present",
    r"(?:is|are) (?:also )?considered",
    r"should be considered",
    r"(?:is|are|remains?) (?:also )?a (?:possibility|concern|differential consideration)",
    r"(?:is|are) of concern",
    r"would be (?:a consideration|in the differential)",
    r"(?:is|are) (?:also )?possible",
    r"(?:is|are) less likely",
    r"(?:can't|has not been|have not been) (?:excluded|ruled out)",
    r"(?:should|needs? to) be (?:excluded|ruled out)",
    r"(?:is|are) not (?:well|clearly) (?:seen|visuali[sz]ed)",
    r"(?:is|are) (?:poorly|incompletely) evaluated",
    r"cannot be (?:assessed|evaluated|confirmed)",
    r"(?:is|are) (?:equivocal|queried|in question|presumed|suggested|doubtful)",
    r"if (?:present|any)",
    r"not (?:entirely )?excluded",
    r"(?:is|are) (?:also )?(?:an? )?(?:alternative |other )?considerations?",
    r"(?:(?:is|are) (?:\w+ )?)?favou?red(?! to (?:represent|be|reflect|indicate))",
    r"(?:is|are) in the differential",
    r"cannot be (?:distinguished|differentiated|separated)(?! from)",
    r"(?:is|are|remains?) difficult to (?:exclude|rule out)",
    r"as (?:an? |other |less likely |possible )?(?:alternatives?|differentials?|possibilit(?:y|ies)|considerations?)",
    r"(?:is|are) (?:the )?(?:(?:main|leading|primary|chief|principal|favou?red|likeliest|most likely|other) )?"
    r"(?:considerations?|differentials?|differential diagnos[ie]s|possibilit(?:y|ies))",
    r"(?:remains?|is still|are still) (?:a )?(?:possible|possibility|consideration|differential|a concern)",
    r"(?:(?:is|are|being) )?(?:an? |the )?less (?:likely|favou?red|probable)(?: alternative| possibility| consideration"
    r"| differential)?",
]
# Alternatives offered right after a mention ("pneumonia versus atelectasis"); unlike the post-triggers
# above they do not reach back along a list ("opacity, atelectasis versus consolidation").
UNCERTAIN_NEXT = [
    r"versus",
    r"vs\.?",
    r"or (?:less likely|more likely|possibly)",
    r"being (?:the )?(?:most |more )?likely",  # "..., sarcoidosis being most likely": that one alone
    r"(?:possible|probable|suspected|questioned|queried|not excluded)(?=\s*(?:[.;,)]|$))",  # "X possible."
]
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
NEGATIVE_PRE = [
    r"no",
    r"not",
    r"without",
    r"negative for",
    r"free of",
    r"free from",
    r"lack of",
    r"lacks",
    r"lacking",
    r"devoid of",
    r"negative (?:examination|exam|study|evaluation|ct|mri|ultrasound|scan) for",
    r"(?:fails?|failed) to (?:reveal|demonstrate|show)",
    r"(?:interval )?(?:clearing|clearance|disappearance|evacuation|resection|excision|complete regression) of",
    r"nothing to suggest",
    r"as opposed to",
    r"inconsistent with",
    r"not (?:consistent|compatible) with",
    r"not in keeping with",
    r"(?:argues?|militates?) against",
    r"excludes",
    r"exclusion of",
    r"non-?(?:dilated|enlarged|thickened|distended)",
    r"clear of",
    r"absence of",
    r"(?<!is )(?<!are )(?<!was )(?<!were )absent",
    r"no (?:evidence|sign|signs|findings|definite|convincing|suspicious|acute|focal|new|residual) (?:of|to suggest)",
    r"resolution of",
    r"(?<!has )(?<!have )(?<!had )(?<!is )(?<!are )(?<!was )(?<!were )resolved",
    r"rules out",
    r"ruled out",
    r"neither",
    r"nor",
    r"denies",
    r"denied",
    r"rather than",
    r"instead of",
    r"removal of",
    r"interval removal of",
    r"(?:interval|spontaneous|presumed|apparent) passage of",  # "interval passage of the previously seen calculus"
    r"(?<=, )none(?: of them)?(?: (?:is|are|was|were))?",  # "lymph nodes are seen, none of pathological size"
    r"no (?:ct |mri? |mr |sonographic |ultrasound |imaging |radiographic )?correlate (?:for|to)",
]
# Negation that holds only right before the mention ("normal heart size", "clear lungs").
NEGATIVE_ADJACENT = [
    r"negative",
    r"normal",
    r"normal[- ]sized?",
    r"normal[- ]calib(?:er|re)",
    r"unremarkable",
    r"clear(?! cell)",
]
# Words that negate only a structure right after them ("intact bones", "patent portal vein"): "intact
# sternal wires" are in place, and "patent foramen ovale" is a finding.
STRUCTURE_NEGATIVE_ADJACENT = [r"intact", r"patent", r"preserved"]
NEGATIVE_POST = [
    r"(?:has|have) (?:since |now |also |completely |entirely )*resolved",
    r"resolved",
    r"(?:is|are|was|were|has|have) (?:been )?(?:now |again |currently )?(?:not|no longer) (?:\w+ )?"
    r"(?:seen|present|identified|visuali[sz]ed|appreciated|evident|enlarged|dilated|demonstrated|detected|noted|appreciable|visible|apparent|recurred|thickened)",
    r"(?:is|are|was|were) (?:now |again |currently |completely |both |all |entirely )?absent",
    r"(?:is|are|appears?|remains?) (?:otherwise |again |still |now )?(?:normal|unremarkable|clear|negative|natural|"
    r"within normal limits|free|age[- ]appropriate)",
    r"(?:is|are) (?:\w+ )?(?:normal|appropriate) for (?:the patient's )?age",
    r"(?:is|are|appears?|remains?) (?:otherwise |again |still |now )?of normal (?:size|calib(?:re|er)|appearance|"
    r"thickness|volume|signal|attenuation|echogenicity|dimensions)",
    r"(?:is|are|was|were) not (?!excluded|ruled|only|entirely|completely|simple|uniform|homogeneous|typical|purely|"
    r"clearly|well|fully|significantly)\w+",
    r"not (?:enlarged|dilated|thickened|distended|compressed|displaced|effaced|seen|identified|present|visuali[sz]ed|"
    r"demonstrated|detected)",
    r"(?:has|have) (?:now )?settled",
    r"(?:has|have) (?:since |now |also |completely |nearly |entirely )*(?:cleared|passed|disappeared|gone)",
    r"within normal limits",
    r"(?:is|are|remains?) (?:at the )?(?:top|upper|high)[- ](?:normal|limits? of normal)",
    r"(?:is|are) not (?:enlarged|dilated|thickened|distended)",
    r"(?:has|have) normal",
    r"(?:top[- ])?normal in (?:size|caliber|calibre|appearance|attenuation|echogenicity|signal|thickness)",
    r"not seen",
    r"(?:(?:is|are|was|were|has been|have been) (?:\w+ )?)?(?:excluded|ruled out)",
    r"negative",
    r"(?:has|have) (?:since |now )?(?:completely )?(?:been )?(?:resorbed|reabsorbed|evacuated|drained)",
    r"(?:has|have) (?:since )?(?:been )?(?:removed|resected|excised)",
    r"(?:is|are|was|were) (?:since |now )?removed",
    r"(?:is|are) (?:now )?gone",
    r"(?:has|have) (?:completely )?(?:regressed|involuted)",
    r"removal",
    r"(?:has|have) normali[sz]ed",
    r"(?:has|have) (?:since |now )?returned to normal",
    r"(?:has|have) (?:since |now |also |completely |fully )*(?:been )?recanali[sz]ed",
    r"(?:is|are) (?:surgically )?absent",
    r"surgically (?:absent|removed)",
    r"wnl",
    r"no longer (?:seen|present|identified|visuali[sz]ed|demonstrated|evident|visible|appreciated|detectable|"
    r"measurable|discernible|identifiable|in place)",
    r"(?:has|have) not recurred",
    r":\s*(?:none|absent|negative|normal|unremarkable|no|not (?:seen|identified|present))",  # "Ascites: none."
]
# A bare verdict right after the mention ("heart size normal", "lungs clear"), not anywhere after it
# ("enlarged with loss of its normal lobulation").
NEGATIVE_NEXT = [
    r"(?:\d+(?:\.\d+)?\s*(?:mm|cm)\s*,?\s+)?"  # "spleen 11.5 cm, normal size"
    r"(?:(?:is|are|was|were|being|appears?|remains?|seems?|looks?|of|within|in|the|a|size|sized|calib(?:er|re)|otherwise|"
    r"overall|entirely|completely|essentially|grossly|again|now|still|both|all|also|and)\s+){0,4}"
    r"(?:normal|unremarkable|clear|natural|age[- ]appropriate)",
]
# Right after a mention, its removal: "craniotomy and meningioma resection" (the meningioma is gone).
_REMOVED_NEXT = re.compile(r"(?:resection|excision|extirpation)\b(?!\s+(?:cavity|bed|margin|site))", re.I)
# An anatomical structure is abnormal only when the text says how; mentioned plainly it is normal.
ABNORMAL_CUE = re.compile(
    r"(?<!non-)(?<!non)\b(?:abnormal\w*|enlarge\w*|thicken\w*|dilat\w+|(?<!well )(?<!well-)distend\w+|distension|"
    r"heterogene\w+|coarse\w*|echogenic|hyperechoic|hypoechoic|irregular\w*|nodular\w*|atroph\w+|shrunken|displaced|deformed|deformity|"
    r"hyperinflat\w+|hyperexpan\w+|edematous|oedematous|inflam\w+|hypoattenuat\w+|hypodens\w+|"
    # contrast filling a vessel is technique ("adequate opacification of the pulmonary arteries")
    r"(?<!good )(?<!adequate )(?<!satisfactory )(?<!optimal )(?<!excellent )(?<!diagnostic )opaci\w+|"
    r"hyperdens\w+|hyperintens\w+|hypointens\w+|lesions?|mass(?:es)?|cysts?|stones?|calcul\w+|fluid|collections?|"
    r"prominen\w+|increased|decreased|elevated|effaced|compressed|collaps\w+|infiltrat\w+|hemorrhag\w+|"
    r"haemorrhag\w+|blood|infarct\w*|narrow\w*|tortuous|ectatic|calcifi\w+|thrombos\w+|thrombus|occlu\w+|"
    r"obstruct\w+|scar\w*|hypervascular|small|shift\w*|herniat\w+|wall thickening|aneurysm\w*|cirrho\w+|lacerat\w+|"
    r"fractur\w+|contus\w+|granulom\w+|steato\w+|fatty|laceration|rupture\w*|injur\w+|"
    r"(?:low|high)(?:[- ]in)?[- ](?:attenuation|density|signal)|swollen|swelling|bulky|bright)\b",
    re.I,
)


_NEGATION_BEFORE = re.compile(r"\b(?:no|not|without|non|negative for|free of|nor)\W+(?:\w+\W+){0,2}$", re.I)


def _abnormal_words(text: str) -> bool:
    """Whether a text says how something is abnormal: an ABNORMAL_CUE word not negated by one of the
    three words before it ("not enlarged by size criteria", "no aggressive lesion" say nothing)."""
    return any(
        not _NEGATION_BEFORE.search(text[max(0, match.start() - 60) : match.start()])
        for match in ABNORMAL_CUE.finditer(text)
    )


def _compile(patterns: list[str]) -> re.Pattern:
    body = "|".join(f"(?:{p})" for p in sorted(patterns, key=len, reverse=True))
    return re.compile(rf"(?<![\w/-])(?:{body})(?![\w-])", re.I)


_PSEUDO = _compile(PSEUDO)
_UNCERTAIN_PRE, _UNCERTAIN_POST = _compile(UNCERTAIN_PRE), _compile(UNCERTAIN_POST)
_UNCERTAIN_NEXT = _compile(UNCERTAIN_NEXT)
_NEGATIVE_PRE, _NEGATIVE_POST = _compile(NEGATIVE_PRE), _compile(NEGATIVE_POST)
_NEGATIVE_ADJACENT = _compile(NEGATIVE_ADJACENT)
_STRUCTURE_NEGATIVE_ADJACENT = _compile(NEGATIVE_ADJACENT + STRUCTURE_NEGATIVE_ADJACENT)
_NEGATIVE_NEXT = _compile(NEGATIVE_NEXT)
_LEVEL_PRIORITY = {"abnormal": 0, "disease": 1, "anatomy": 2}
_OTHER_MENTION = "\u00a7"  # stands for another entity's mention inside a trigger's window
_LIST_WORDS = {_OTHER_MENTION, "", "or", "and", "nor"}
# Findings offered as alternatives: "A or B", "either A or B", "A, B, or C" (a negation or hedge, when
# there is one, decides); what follows a mention, and what precedes one, with other mentions as marks.
_FILLER = (
    r"(?:(?:an?|the)\s+)?(?:(?!(?:without|with|and|or|nor|no|not|may|might|could|can|represents?|reflects?|is|are|"
    r"was|were|be|includ\w*|suggest\w*|possibly|likely|probably|due|in|of|to|for|from|at|on)\b)[\w-]+\s+){0,2}"
)
# an item of such a list: another mention, or a word the vocabulary lacks ("hypoalbuminaemia")
_LISTED = rf"(?:{_OTHER_MENTION}|(?!(?:or|and|nor)\b)[a-z-]+\b)"
_ALTERNATIVE_AFTER = re.compile(
    rf"(?:\s*,\s*{_FILLER}{_LISTED})*\s*,?\s*(?<![\w-])(?:and/)?or\s+(?:possibly\s+)?{_FILLER}{_LISTED}", re.I
)
_ALTERNATIVE_BEFORE = re.compile(
    rf"{_OTHER_MENTION}(?:\s*,\s*{_FILLER}{_LISTED})*\s*,?\s*(?<![\w-])(?:and/)?or\s+(?:possibly\s+)?{_FILLER}$", re.I
)
# "Differential for <subject> includes A, B": the subject is what was seen, the list is uncertain.
_DIFFERENTIAL_FOR = re.compile(
    r"\b(?:differential(?: diagnos[ie]s| considerations?)?|ddx|(?:diagnostic )?considerations|possibilities)\s+"
    r"(?:for|of)\s+(?:[^.;:]|\.(?=\d)){1,120}?\s+(?P<verb>(?:would )?includes?|are|is)\b",
    re.I,
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
_MODIFIER_PHRASE = re.compile(rf"^\s*{_MODIFIERS}\s+{_MODIFIER_WORDS}{_OTHER_MENTION}", re.I)
_IN_MODIFIER = re.compile(rf"{_OTHER_MENTION}\s+{_MODIFIERS}\s+{_MODIFIER_WORDS}$", re.I)
# A structure named as the reference of a comparison says nothing abnormal of it.
_COMPARATOR = re.compile(
    r"\b(?:than|relative to|compared (?:to|with))\s+(?:that of\s+|those of\s+)?(?:the\s+)?(?:adjacent\s+|normal\s+)?$",
    re.I,
)
# A structure named to say where something else is ("fatty sparing adjacent to the gallbladder fossa",
# "a mass separate from the left ovary") or that it was not well seen ("poor visualisation of the
# portal vein walls") is a landmark: the sentence says nothing of its state.
_LANDMARK = re.compile(
    r"\b(?:adjacent to|separate from|next to|distinct from|(?:poor|limited|reduced) visuali[sz]ation of)\s+"
    r"(?P<gap>(?:[\w-]+\s+){0,4})$",
    re.I,
)
# A structure named as a place: "(lesion) in the trachea or main bronchi".
_PLACE_BEFORE = re.compile(r"\b(?:in|of|at|within|into|from|along|involving|throughout)\s+(?:the\s+|both\s+)?$", re.I)
# A finding named as where a negated one would be: "no enhancing component within the renal cyst".
_WHERE_THE_OTHER_IS = re.compile(
    rf"\b(?:no|without)\s+(?:(?:(?:[\w-]+|{_OTHER_MENTION})\s+){{0,8}}{_OTHER_MENTION}[^{_OTHER_MENTION}]{{0,40}}?\b(?:within|inside|in|of)|"
    rf"(?:[\w-]+\s+){{1,3}}(?:within|inside|in))\s+"
    rf"(?:the|this|that|its)\s+(?:(?!(?:no|not|without|nor|or|and)\b)[\w.-]+\s+){{0,4}}$",
    re.I,
)

# A size the report itself calls normal, whatever the usual limit ("CBD 8 mm, within expected limits
# post cholecystectomy", "common duct 8 mm, normal for age").
_SIZE_CALLED_NORMAL = re.compile(
    r"\s*(?:mm|cm|%)?[^;.]{0,25}?\b(?:(?:is|are|which is|and)\s+)?(?:within (?:the )?(?:normal|expected|accepted)|"
    r"normal (?:for|after|post|given)|(?:upper|top|high)[- ](?:limit of )?normal|physiological|"
    r"(?:as )?expected (?:for|after|post|given))",
    re.I,
)

# After a mention, a comma opening a new description ends its post-triggers' reach
# ("a granuloma in the right upper lobe, the lung is otherwise normal").
_NEW_DESCRIPTION = re.compile(r",\s+(?=(?:the|a|an|there|with|otherwise|and the|but|both|all|each)\b)", re.I)


# Two findings joined by a hyphen, as translated reports write them ("pericardial effusion-thickening",
# "lytic-destructive lesion"): read as "effusion/thickening", a list, as long as the original.
_HYPHENATED_LIST = re.compile(
    r"\b(effusion|thickening|consolidation|atelectasis|lytic)-(thickening|effusion|atelectasis|consolidation|destructive)\b",
    re.I,
)


def split_sections(report: str) -> dict[str, str]:
    """Sections by heading, under the name of the section each heading names (`section_name`: "Report:"
    is "findings", "Opinion:" and "Conclusion:" are "impression", "Clinical details:" is "indication");
    text before any heading is "preamble", a report without headings is "body". Two headings of one
    section are one section, their texts a paragraph apart."""
    report = report.replace("\r\n", "\n").replace("\r", "\n")
    matches = [m for m in SECTION_HEADER.finditer(report) if m.group(1) or _standalone_heading(m.group(2))]
    if not matches:
        return {"body": report.strip()}
    sections = {"preamble": report[: matches[0].start()].strip()}
    for match, following in zip(matches, [*matches[1:], None]):
        name = section_name(match.group(1) or match.group(2))
        text = report[match.end() : following.start() if following else len(report)].strip()
        sections[name] = (sections.get(name, "") + "\n\n" + text).strip()
    return sections


def section_name(heading: str) -> str:
    """The section a heading names ("Clinical details" -> "indication", "Opinion" -> "impression");
    `ValueError` for a word that names none."""
    name = next((name for pattern, name in _SECTION_OF if pattern.match(heading.strip())), None)
    if name is None:
        raise ValueError(f"{heading!r} is not a section heading")
    return name


def _standalone_heading(words: str) -> bool:
    """A heading without a colon counts only in capitals or title case ("FINDINGS", "Impression"), so a
    line that merely begins with such a word ("Findings are stable") is not a heading."""
    return words.isupper() or words.istitle()


def unheaded_findings(sections: dict[str, str]) -> str:
    """The findings of a report with no findings or impression heading: the whole body, or, after a
    history, indication, technique or comparison heading, what follows that heading's first sentence
    ("Indication: headaches. No intracranial mass." reads the second sentence, not the history)."""
    if "body" in sections:
        return sections["body"]
    parts = [sections.get("preamble", "")]
    for name, text in sections.items():
        if name != "preamble":
            parts.extend(split_sentences(text)[1:])
    return " ".join(part for part in parts if part)


def examination_title(sections: dict[str, str]) -> str:
    """What the examination is ("US RENAL", "CT KUB"): its heading's text or the title line before
    the first heading; empty for a report without headings (its first line may be a finding)."""
    if "examination" in sections:
        return sections["examination"].split("\n")[0].strip()
    preamble = sections.get("preamble", "").strip()
    return preamble.split("\n")[0].strip() if preamble else ""


def unheaded_findings_beside_an_impression(sections: dict[str, str]) -> str:
    """Findings written under no heading of their own in a report that has an impression but no
    findings heading: a preamble that starts with a sentence rather than a title; the paragraphs after
    the first of the preamble or of a request, technique or comparison section ("Clinical: pre-op.\n\n
    The heart is not enlarged."); organ lines in a first paragraph ("Clinical: RUQ pain.\nLiver:
    normal.\nGallbladder: gallstones."). A request's own lines ("History: 60F.\nKnown pleural
    effusion.", "CT CHEST\nHistory of breast cancer.") and recommendations are not read."""
    parts = []
    for name, text in sections.items():
        if name in READ_SECTIONS or name == "recommendation" or not text:
            continue
        first, *rest = re.split(r"\n\s*\n", text)
        lines = first.split("\n")
        if name == "preamble" and not _is_title(lines[0]):
            parts.append(first)  # findings written before the impression ("The lungs are clear.\nImpression:")
        else:
            parts.extend(line for line in lines[1:] if _HEADING.match(line.strip()))
        parts.extend(rest)
    return "\n\n".join(part.strip() for part in parts if part.strip())


def _is_title(line: str) -> bool:
    """A title line ("CXR PA", "CT pulmonary angiogram"), not a sentence ("The lungs are clear.")."""
    return not line.strip().endswith(".")


def split_sentences(text: str) -> list[str]:
    parts = SENTENCE_END.split(text.strip())
    return [" ".join(p.split()) for p in parts if p and p.strip(" .")]


_INVERTED = "inverted"  # a normal state ("the portal vein is patent") says the finding is absent
_PREDICATE = "predicate"  # a state said of its subject ("the spleen is [enlarged]"): read as worded
_INVERSE = {MentionStatus.POSITIVE: MentionStatus.NEGATIVE, MentionStatus.NEGATIVE: MentionStatus.POSITIVE}


def _outermost(mentions) -> list[tuple[int, int, Entity]]:
    """Mentions as marks in a text: one per span, none inside another (a name within a description)."""
    spans = {(m[0], m[1]): m for m in mentions}
    return [m for (s, e), m in spans.items() if not any(o != (s, e) and o[0] <= s and e <= o[1] for o in spans)]


def _triggers(pattern: re.Pattern, text: str, kind: str) -> list[tuple[int, int, str, str]]:
    return [(m.start(), m.end(), kind, m.group()) for m in pattern.finditer(text)]


@dataclass(frozen=True)
class _Matcher:
    """One entity's phrasings as a pattern; `starts`: the first three letters of their first words
    (American and British spellings), so a sentence without any of them is not searched at all."""

    pattern: re.Pattern
    entity: Entity
    context: re.Pattern | None
    starts: frozenset[str] | None
    measurement: Measurement | None = None  # a size pattern: its match is the finding only above the limit
    normal: bool = False  # a normal state: what it says of the subject, it says the other way of the finding


@dataclass(frozen=True)
class _MatcherSet:
    """A set of entities' matchers, indexed by the word starts that can begin a match: a sentence
    is searched only with the matchers one of its words could begin (and those always searched)."""

    matchers: tuple[_Matcher, ...]
    always: tuple[int, ...]
    by_start: dict[str, tuple[int, ...]]

    def relevant(self, sentence: str) -> list[_Matcher]:
        """The matchers worth running on a sentence, in their original order."""
        indices = set(self.always)
        for start in _sentence_starts(sentence):
            indices.update(self.by_start.get(start, ()))
        return [self.matchers[i] for i in sorted(indices)]


@functools.lru_cache(maxsize=16)
def _compiled_matchers(entities: tuple[Entity, ...]) -> _MatcherSet:
    """The matchers of a set of entities, compiled once per process (a family's vocabulary compiles
    in seconds; decomposers are made per worker, per test, per call)."""
    matchers = []
    for entity in entities:
        context = re.compile(entity.context, re.I) if entity.context else None
        for phrasings, needs in ((entity.phrasings(), None), (entity.contextual, context)):
            # plain phrasings grouped by how their first word starts, so a sentence runs only the
            # phrasings its words could begin; patterns are always run
            groups: dict[frozenset[str] | None, list[str]] = {}
            for phrasing in phrasings:
                starts = None if phrasing.startswith("re:") else _word_starts([phrasing])
                groups.setdefault(starts, []).append(phrasing)
            for starts, group in groups.items():
                if group:
                    body = "|".join(f"(?:{phrase_pattern(p)})" for p in group)
                    pattern = re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.I)
                    matchers.append(_Matcher(pattern, entity, needs, starts))
        # described and measured findings: a sentence is searched only when it could name a subject
        for description in entity.descriptions:
            for normal in (False, True):
                if patterns := description_patterns(description, normal):
                    body = "|".join(f"(?:{p})" for p in patterns)
                    pattern = re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", re.I)
                    starts = _subject_starts(description.subjects)
                    matchers.append(_Matcher(pattern, entity, None, starts, normal=normal))
        for measurement in entity.measurements:
            pattern = re.compile(rf"(?<![\w-]){measurement_pattern(measurement)}", re.I)
            needs = re.compile(measurement.context, re.I) if measurement.context else None
            matchers.append(_Matcher(pattern, entity, needs, _subject_starts(measurement.subjects), measurement))
    by_start: dict[str, list[int]] = {}
    for index, matcher in enumerate(matchers):
        for start in matcher.starts or ():
            by_start.setdefault(start, []).append(index)
    always = tuple(i for i, matcher in enumerate(matchers) if matcher.starts is None)
    return _MatcherSet(tuple(matchers), always, {k: tuple(v) for k, v in by_start.items()})


def _american(word: str) -> str:
    """A word's start as the vocabulary spells it ("haemorrhage" -> "hemorrhage", "oedema" -> "edema")."""
    return re.sub(r"^o(?=edem|esophag)", "", re.sub(r"^ha(?=em)", "h", word))


def _word_starts(phrases: list[str]) -> frozenset[str] | None:
    """The first three letters of each phrase's first word (shorter words whole), or None when a
    phrase starts with something else (a number, a symbol): those are always searched."""
    starts = set()
    for phrase in phrases:
        word = re.match(r"[a-z]*", re.split(r"[\s-]+", phrase.lower().strip())[0]).group()
        if not word:
            return None
        starts.update({word[:3], _american(word)[:3]})
    return frozenset(starts)


def _subject_starts(subjects: tuple[str, ...]) -> frozenset[str] | None:
    """The word starts of a description's subjects (None, always searched, when one is a pattern)."""
    return None if any(s.startswith("re:") for s in subjects) else _word_starts(list(subjects))


def _sentence_starts(sentence: str) -> frozenset[str]:
    """The first one, two and three letters of every word of a sentence, in both spellings."""
    words = set(re.findall(r"[a-z]+", sentence.lower()))
    words |= {_american(w) for w in words}
    return frozenset(w[:n] for w in words for n in (1, 2, 3))


class _Mention(NamedTuple):
    """An entity found in a sentence, and how to read it."""

    start: int
    end: int
    entity: Entity
    # the status its size gives, _INVERTED (a normal state of the finding's subject), _PREDICATE (a
    # stated abnormal state), or None: as the words around it say
    how: MentionStatus | str | None
    described: bool  # described ("the spleen is enlarged") rather than named
    subject: int  # where its subject starts when a state is said of it ("[the spleen] is enlarged"), else start


def _how(readings: dict[tuple[int, int], _Mention] | None, span: tuple[int, int]) -> MentionStatus | str | None:
    """How the mention at `span` reads (see `_Mention.how`)."""
    mention = (readings or {}).get(span)
    return mention.how if mention is not None else None


# Coordination that shares a modifier or a head between two names: "pericardial effusion or
# [thickening]" (pericardial thickening), "the [cardiac] and mediastinal silhouettes" (the cardiac
# silhouette). The word after or before a name's conjunction, and the conjunction itself.
_SHARED_MODIFIER = re.compile(r"\s*(?:,\s*|/|\s(?:and/or|or|and|nor)\s+)([a-z]{4,})\b", re.I)
_SHARED_HEAD = re.compile(r"\b([a-z]{4,})(?:\s*,\s*|\s*/\s*|\s+(?:and/or|or|and)\s+)$", re.I)
_NOT_A_MODIFIER = {"with", "without", "there", "which", "that", "this", "these", "those", "both", "either", "neither"}


def _matched_mentions(sentence: str, matcher_set: _MatcherSet, heading: str = "", region: str = "") -> list[_Mention]:
    """The mentions the vocabulary's phrasings, descriptions and measurements match in a sentence:
    longest first, then phrasings that need their context (the sentence, the `heading`, the report's
    `region`), then the more specific entity; no overlaps."""
    candidates: list[tuple[_Mention, bool]] = []  # each with whether its phrasing needs no context
    covered = []
    for matcher in matcher_set.relevant(sentence):
        context = matcher.context
        if context is not None and not (
            context.search(sentence) or (heading and context.search(heading)) or (region and context.search(region))
        ):
            continue
        has_state = "state" in matcher.pattern.groupindex
        described = has_state or matcher.measurement is not None
        for match in matcher.pattern.finditer(sentence):
            how: MentionStatus | str | None = _INVERTED if matcher.normal else None
            if how is None and has_state and match.group("state"):
                how = _PREDICATE
            if matcher.measurement is not None:
                verdict = matcher.measurement.verdict(measured_sizes(match.group("size"), match.group("unit")))
                if verdict is None:
                    continue  # between the limits: the size alone says nothing
                if verdict and _SIZE_CALLED_NORMAL.match(sentence, match.end("size")):
                    verdict = False  # "CBD 8 mm, within expected limits after cholecystectomy"
                how = MentionStatus.POSITIVE if verdict else MentionStatus.NEGATIVE
            if has_state and match.group("state"):
                start, end = match.span("state")
                # the subject is the state's: no second mention of the finding at it ("CBD [not dilated]")
                covered.append((match.start(), start, matcher.entity))
            else:
                start, end = match.span()
            if end > start:
                mention = _Mention(start, end, matcher.entity, how, described, min(start, match.start()))
                candidates.append((mention, context is None))
    candidates = [
        (m, free)
        for m, free in candidates
        if not any(m.entity is e and m.start < e_end and s < m.end for s, e_end, e in covered)
    ]
    candidates.sort(
        key=lambda c: (
            -(c[0].end - c[0].start),
            c[0].how is None,
            c[1],
            _LEVEL_PRIORITY[c[0].entity.level],
            c[0].start,
        )
    )
    taken: list[_Mention] = []
    for mention in (m for m, _ in candidates if not m.described):
        if all(mention.end <= t.start or mention.start >= t.end for t in taken):
            taken.append(mention)
    # a name that is also a measured subject is read by its size ("CTR 0.44", "spleen 11.5 cm")
    for mention in (m for m, _ in candidates if isinstance(m.how, MentionStatus)):
        taken = [
            mention if (t.start, t.end, t.entity) == (mention.start, mention.end, mention.entity) else t for t in taken
        ]
    # Descriptions come after names: they may hold other entities' names ("enlargement of the [spleen]")
    # and share their span with another description ("the liver and spleen are [enlarged]"),
    # but never cut into a name.
    for mention in (m for m, _ in candidates if m.described):
        overlapping = [t for t in taken if not (mention.end <= t.start or mention.start >= t.end)]
        if all(
            t.entity is not mention.entity
            and (
                (mention.start <= t.start and t.end <= mention.end and not t.described)
                or (t.described and (t.start, t.end) == (mention.start, mention.end))
            )
            for t in overlapping
        ):
            taken.append(mention)
    return sorted(taken, key=lambda m: m.start)


def _elided_mentions(sentence: str, taken: list[_Mention], matchers: _MatcherSet, region: str) -> list[_Mention]:
    """Names a coordination shortens: the word that shares a named finding's modifier or head is a
    mention of the entity the full phrase names ("No pericardial effusion or thickening")."""

    def free(start: int, end: int) -> bool:
        return all(end <= t.start or start >= t.end for t in [*taken, *found])

    def names(phrase: str) -> Entity | None:
        whole = [m for m in _matched_mentions(phrase, matchers, "", region) if not m.described]
        return whole[0].entity if len(whole) == 1 and (whole[0].start, whole[0].end) == (0, len(phrase)) else None

    found: list[_Mention] = []
    for mention in [t for t in taken if not t.described]:
        words = sentence[mention.start : mention.end].split()
        if len(words) < 2:
            continue
        after = _SHARED_MODIFIER.match(sentence, mention.end)
        if after and after.group(1).lower() not in _NOT_A_MODIFIER and free(*after.span(1)):
            entity = names(" ".join([*words[:-1], after.group(1)]))
            if entity is not None and entity is not mention.entity:
                found.append(_Mention(*after.span(1), entity, None, False, after.start(1)))
        before = _SHARED_HEAD.search(sentence[: mention.start])
        if before and before.group(1).lower() not in _NOT_A_MODIFIER and free(*before.span(1)):
            entity = names(" ".join([before.group(1), *words[1:]]))
            if entity is not None and entity is not mention.entity:
                found.append(_Mention(*before.span(1), entity, None, False, before.start(1)))
    return found


class RuleBasedDecomposer(ReportDecomposer):
    """Offline decomposition with synonyms and NegEx-style scopes; no model, no network.

    `window` bounds how many words before a mention a pre-trigger may stand (NegEx uses 5-6); other
    entities' mentions in between do not count, so a negation reaches along a list ("no
    consolidation, pleural effusion or pneumothorax"). The trigger nearest the mention decides."""

    def __init__(self, ontology: Ontology | None = None, window: int = 6):
        super().__init__(ontology)
        self.window = window

    def find_mentions(
        self, sentence: str, entities: list[Entity] | _MatcherSet, heading: str = ""
    ) -> list[tuple[int, int, Entity]]:
        """Entity mentions in a sentence: longest first, then phrasings that need their context (the
        organ named in the sentence, or in the `heading` of a structured report's line such as
        "Liver:"), then the more specific entity; no overlaps."""
        return [mention[:3] for mention in self._mentions(sentence, entities, heading)]

    @staticmethod
    def _mentions(
        sentence: str, entities: list[Entity] | _MatcherSet, heading: str = "", region: str = ""
    ) -> list[_Mention]:
        """`find_mentions`, each with how to read it and whether it is a description. `region`: the body
        region the report is about (`MODALITY_REGION`), a context for every sentence."""
        matcher_set = entities if isinstance(entities, _MatcherSet) else _compiled_matchers(tuple(entities))
        taken = _matched_mentions(sentence, matcher_set, heading, region)
        return sorted([*taken, *_elided_mentions(sentence, taken, matcher_set, region)], key=lambda m: m.start)

    def mention_status(
        self,
        sentence: str,
        start: int,
        end: int,
        mentions: list[tuple[int, int, Entity]] = (),
        entity: Entity | None = None,
        readings: dict[tuple[int, int], _Mention] | None = None,
    ) -> MentionStatus:
        """NegEx within the mention's clause. `mentions`: every mention in the sentence (other entities
        do not use up the trigger window); `entity`: the one at (start, end), so that a plainly
        mentioned anatomical structure reads as normal; `readings`: the mentions with a reading of their
        own (span -> mention: the status a size gives, a normal state, a stated state)."""
        # a pseudo-trigger that is part of the mention is no pseudo-trigger ("no [enlargement of the spleen]")
        masked = _PSEUDO.sub(lambda m: _mask_pseudo(m, start, end, sentence), sentence)
        masked = _mask_differential_subjects(masked)
        # the whole sentence is searched: a break's look-ahead may reach into the mention ("after [ureteric
        # stent] placement")
        clause_start = max([m.end() for m in CLAUSE_BREAK.finditer(masked) if m.end() <= start], default=0)
        following = CLAUSE_BREAK.search(masked, end)
        clause_end = following.start() if following else len(masked)
        # other mentions are marks in the text; a stated state is no mark: its words say how the subject is
        # ("the spleen is [not enlarged]", "are [normal in size]")
        readings = readings or {}
        marks = _outermost([m for m in mentions if _how(readings, m[:2]) not in (_INVERTED, _PREDICATE)])
        before = self._window_before(masked, clause_start, start, marks)
        structure = entity is not None and entity.level == "anatomy"
        status = self._pre_status(before, masked[clause_start:start], structure)
        if status is MentionStatus.NEGATIVE and _AND_BEFORE.search(before + " ") and _OWN_PREDICATE.match(masked[end:]):
            status = None  # "no free gas and haemoperitoneum is tracking around the spleen": a new clause
        own = readings.get((start, end))
        if status is MentionStatus.NEGATIVE and own is not None and own.how == _PREDICATE:
            # "No gallstones, CBD dilated to 9 mm": a state said of a subject listed after another finding
            # and a comma is a clause of its own
            listed = [m for m in marks if clause_start <= m[0] and m[1] <= own.subject]
            own_words = masked[own.subject : start]  # "CBD [not] dilated" negates itself
            if (
                listed
                and _COMMA_ONLY.match(masked[max(m[1] for m in listed) : own.subject])
                and _STATED.search(masked[own.subject : end])  # a verb, not a noun ("no mass, midline shift")
                and self._pre_status(own_words, own_words, structure) is None
            ):
                status = None
        wide = self._window_before(masked, clause_start, start, marks, window=2 * self.window)
        if status is MentionStatus.NEGATIVE and not structure and _WHERE_THE_OTHER_IS.search(wide + " "):
            status = MentionStatus.POSITIVE  # "no fat within the nodule": the nodule is there
        if status is None:
            # "the oedema surrounding the metastasis has cleared": the verb is about the subject only
            in_modifier = entity is not None and not structure and _IN_MODIFIER.search(before + " ")
            # a normal state is the predicate itself: what follows it is about other things
            stated = in_modifier or _how(readings, (start, end)) == _INVERTED
            placed = structure and _PLACE_BEFORE.search(masked[clause_start:start]) is not None
            status = (
                MentionStatus.POSITIVE
                if stated
                else self._post_status(masked, end, clause_end, marks, structure, placed)
            )
        alternative = _ALTERNATIVE_BEFORE.search(before + " ")  # "either a bulla or a pneumothorax"
        if status is MentionStatus.POSITIVE and entity is not None and entity.level != "anatomy" and alternative:
            return MentionStatus.UNCERTAIN
        if status is MentionStatus.POSITIVE and structure:
            if _COMPARATOR.search(sentence[:start]):  # "the liver lower in attenuation than the spleen"
                return MentionStatus.NEGATIVE
            landmark = _LANDMARK.search(sentence[:start])
            if landmark and not _abnormal_words(landmark.group("gap")):  # not "adjacent to the thickened GB"
                return MentionStatus.NOT_MENTIONED
            clause = list(masked[clause_start:clause_end])
            for other_start, other_end, other in mentions:  # a negated finding's words say nothing here
                if other is not entity and clause_start <= other_start and other_end <= clause_end:
                    clause[other_start - clause_start : other_end - clause_start] = " " * (other_end - other_start)
            if not _abnormal_words("".join(clause)):
                # "an intimal flap in the descending aorta": the structure is as its finding is
                in_clause = [m for m in mentions if clause_start <= m[0] and m[1] <= clause_end]
                named = {other.id for _, _, other in in_clause if other.level == "anatomy"}
                # ... not as another structure named with its finding ("lungs clear, mediastinum widened")
                findings = [
                    self._read(sentence, other_start, other_end, mentions, other, readings)
                    for other_start, other_end, other in in_clause
                    if other.level != "anatomy" and self._about(other, entity, named)
                ]
                for found in (MentionStatus.POSITIVE, MentionStatus.UNCERTAIN):
                    if found in findings:
                        return found
                return MentionStatus.NEGATIVE
        return status

    def _about(self, finding: Entity, structure: Entity, named: set[str]) -> bool:
        """Whether a finding in a structure's clause is about it: its own, one of no structure, or one of a
        structure the clause does not name ("volume loss in the right hippocampus" is the brain's)."""
        anatomy = self.ontology.anatomy_of(finding)
        return anatomy is None or anatomy.id == structure.id or anatomy.id not in named

    def _read(self, sentence: str, start: int, end: int, mentions, entity: Entity, readings) -> MentionStatus:
        """A mention's status, read as `readings` says: a size's status, inverted, or as worded."""
        how = _how(readings, (start, end))
        if isinstance(how, MentionStatus):
            return how
        status = self.mention_status(sentence, start, end, mentions, entity, readings)
        return _INVERSE.get(status, status) if how == _INVERTED else status

    def _window_before(self, masked: str, clause_start: int, start: int, mentions, window: int | None = None) -> str:
        """The words before a mention that a pre-trigger may stand in: back to the clause start, at most
        `window` words that are not other mentions, and not past ", and" that opens a new description."""
        text = masked[clause_start:start]
        for other_start, other_end, _ in sorted(mentions, key=lambda m: -m[0]):
            if clause_start <= other_start and other_end <= start:
                local = other_start - clause_start, other_end - clause_start
                text = text[: local[0]] + f" {_OTHER_MENTION} " + text[local[1] :]
        new_subject = list(_NEW_SUBJECT.finditer(text))
        if new_subject:  # "favoured to be a lymph node, the lungs are clear"
            text = text[new_subject[-1].end() :]
        new_item = list(_NEW_ITEM.finditer(text))
        if new_item and _last_trigger_negates(text[: new_item[-1].start()]):
            text = text[new_item[-1].end() :]
        for match in reversed(list(_AND_CLAUSE.finditer(text))):
            following = [w for w in text[match.end() :].split() if w != _OTHER_MENTION]
            if len(following) >= 2:
                text = text[match.end() :]
                break
        words, kept = text.split(), 0
        for index in range(len(words) - 1, -1, -1):
            if words[index] != _OTHER_MENTION and words[index].strip(",") not in ("or", "and", "nor", ""):
                kept += 1
            if kept > (window or self.window):
                return " ".join(words[index + 1 :])
        return " ".join(words)

    @staticmethod
    def _post_status(
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
                text = text[: other_start - end] + f" {_OTHER_MENTION} " + text[other_end - end :]
        text = _NEW_DESCRIPTION.split(text, maxsplit=1)[0]
        text = _MODIFIER_PHRASE.sub("", text, count=1)  # "the oedema [surrounding the metastasis] has cleared"
        immediate = text.split(_OTHER_MENTION)[0]
        words = text.split()
        joined = False  # a list joined by "and"/"or" shares its verdict; "X, Y is normal" is Y's alone
        while words:
            if words[0] == _OTHER_MENTION or words[0].strip(",/") in ("", "or", "and", "nor"):
                joined = joined or words[0].strip(",/") in ("or", "and", "nor") or words[0] == "/"
                words.pop(0)
            elif _OTHER_MENTION in words[1:3] and all(
                w.isalpha() and not _TRIGGER_WORD.fullmatch(w) and w.lower() not in _PREPOSITIONS
                for w in words[: words.index(_OTHER_MENTION)]
            ):
                del words[: words.index(_OTHER_MENTION)]  # a listed mention's own modifiers ("atypical")
            else:
                break
        listed = " ".join(words).split(_OTHER_MENTION)[0]
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

    def _pre_status(self, before: str, clause_before: str, structure: bool = False) -> MentionStatus | None:
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
            *[
                t
                for t in _triggers(adjacent, before, "negative")
                if t[0] >= adjacent_from and "," not in before[t[1] :]
            ],
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

    def decompose(self, report: str, modality: str, entities: list[Entity] | None = None) -> ReportDecomposition:
        if not report or not report.strip():
            raise EmptyReportError("the report is empty")
        family = self.ontology.family_of(modality)
        family_entities = self.ontology.entities(family)
        entities = list(entities) if entities is not None else family_entities
        # spans are resolved against the whole family (so "effusion" inside "pericardial effusion"
        # is not read as a pleural effusion), then only the requested entities are reported
        matching = list({e.id: e for e in [*family_entities, *entities]}.values())
        matchers = _compiled_matchers(tuple(matching))
        sections = split_sections(report)
        region = MODALITY_REGION.get(modality, "")
        read = [sections[name] for name in READ_SECTIONS if name in sections] or [unheaded_findings(sections)]
        if "findings" not in sections and "impression" in sections:
            read.insert(0, unheaded_findings_beside_an_impression(sections))
        statements = {e.id: EntityStatement(e.id) for e in entities}
        by_id = {e.id: e for e in entities}
        found: dict[str, list[MentionStatus]] = {}
        said_normal: set[str] = set()  # structures the report itself calls normal
        said_otherwise: set[str] = set()  # ... or abnormal / possibly abnormal
        otherwise_normal: set[str] = set()  # "the lungs are otherwise clear": normal but for what was named
        # the examination's name is every sentence's context ("RENAL ULTRASOUND ... No calculi.")
        title = examination_title(sections)
        for text in read:
            heading = ""
            for written in split_sentences(text):
                sentence = _HYPHENATED_LIST.sub(r"\1/\2", written)  # read as a list; the statement keeps the text
                heading = _heading(sentence) or heading
                read_mentions = self._mentions(sentence, matchers, f"{heading} {title}".strip(), region)
                mentions = [mention[:3] for mention in read_mentions]
                readings = {(m.start, m.end): m for m in read_mentions if m.how is not None}
                statuses = [
                    self._read(sentence, start, end, mentions, entity, readings) for start, end, entity in mentions
                ]
                # a finding both described and named: the name decides ("renal pelvic dilatation
                # represents an extrarenal pelvis rather than hydronephrosis")
                named = {m.entity.id for m in read_mentions if not m.described}
                kept = [i for i, m in enumerate(read_mentions) if not (m.described and m.entity.id in named)]
                mentions, statuses = [mentions[i] for i in kept], [statuses[i] for i in kept]
                statuses = _restated_in_parentheses(sentence, mentions, statuses)
                statuses = _structures_in_context(
                    sentence, mentions, _hedged_evidence(sentence, mentions, statuses), self.ontology.anatomy_of
                )
                for (start, end, entity), status in zip(mentions, statuses):
                    if status is MentionStatus.NOT_MENTIONED:
                        continue
                    if (
                        entity.level == "anatomy"
                        and status is MentionStatus.NEGATIVE
                        and (
                            _OTHERWISE.search(sentence[max(0, start - 40) : end + 40])
                            or _EXCEPT_TRAILING.match(sentence[end:])
                            or ((leading := _EXCEPT_LEADING.match(sentence)) and start >= leading.end())
                        )
                    ):
                        otherwise_normal.add(entity.id)
                    anatomy = self.ontology.anatomy_of(entity) if entity.level == "abnormal" else None
                    targets = [entity.id] + ([anatomy.id] if anatomy is not None else [])
                    if entity.level == "anatomy":
                        (said_normal if status is MentionStatus.NEGATIVE else said_otherwise).add(entity.id)
                    for target in (t for t in targets if t in by_id):
                        found.setdefault(target, []).append(status)
                        if written not in statements[target].sentences:
                            statements[target].sentences.append(written)
        for entity_id, statuses in found.items():
            status = aggregate_status(statuses)
            # "Mediastinum: normal. Hila: prominent, possibly adenopathy": a possibility in a structure
            # does not overrule the report calling it normal; a finding seen there does
            called_normal = entity_id in said_normal and entity_id not in said_otherwise
            if entity_id in otherwise_normal or (called_normal and status is MentionStatus.UNCERTAIN):
                status = MentionStatus.NEGATIVE
            statements[entity_id].status = status
        return ReportDecomposition(family, sections, statements)


# A structured report's line heading ("Liver:", "Extra-axial spaces:", "Lines/tubes:"): the organ it
# names is the context of the sentences that follow it, up to the next heading.
_HEADING = re.compile(r"^(?:\d+[.)]\s*)?([A-Za-z][A-Za-z /&,-]{1,40}?)\s*:")


def _heading(sentence: str) -> str:
    match = _HEADING.match(sentence)
    return match.group(1) if match else ""


_OTHERWISE = re.compile(r"\b(?:otherwise|remaining|remainder of|rest of)\b", re.I)
# "Lungs clear apart from basal scarring": the organ is normal but for what is named after it.
_EXCEPT_TRAILING = re.compile(rf"^[\w\s-]{{0,30}}?\b{_EXCEPTION}\b", re.I)
# "Apart from a small nodule, the lungs are clear": the organ is normal but for what was named.
_EXCEPT_LEADING = re.compile(rf"^\s*{_EXCEPTION}\b[^,;]*,", re.I)


def _structures_in_context(
    sentence: str,
    mentions: list[tuple[int, int, Entity]],
    statuses: list[MentionStatus],
    anatomy_of: Callable[[Entity], Entity | None],
) -> list[MentionStatus]:
    """A structure heading a structured line ("Aorta: ascending aorta 4.6 cm, aneurysmal.") is
    abnormal when the line reports a finding (present or possible) or says how it is abnormal, and
    normal when the line calls it normal or reports only absences ("Lungs: No nodules."). A heading
    naming several structures ("Lungs/airways:") gives each only the line's findings of its own."""
    heading = _HEADING.match(sentence)
    statuses = list(statuses)
    for i, (start, end, entity) in enumerate(mentions):
        if heading is None or entity.level != "anatomy" or start > heading.end(1):
            continue
        shared = any(m[2].level == "anatomy" and m[2] is not entity and m[1] <= heading.end(1) for m in mentions)
        if end < heading.end(1) and not shared:
            continue  # a structure's modifier in a heading of one structure ("Left kidney:")
        line = sentence[heading.end() :]
        others = [status for j, status in enumerate(statuses) if j != i]
        if shared and not _NEGATIVE_POST.match(line.strip()):
            own = [
                status
                for (_, _, other), status in zip(mentions, statuses)
                if other.level != "anatomy" and (found := anatomy_of(other)) is not None and found.id == entity.id
            ]
            placed = {
                found.id
                for (_, _, other) in mentions
                if other.level != "anatomy" and (found := anatomy_of(other)) is not None
            }
            first = min(m[0] for m in mentions if m[2].level == "anatomy" and m[1] <= heading.end(1))
            if own:
                statuses[i] = aggregate_status(own)
            elif not (MentionStatus.POSITIVE in others or MentionStatus.UNCERTAIN in others):
                statuses[i] = MentionStatus.NEGATIVE  # "Lungs/airways: clear."
            elif placed & {m[2].id for m in mentions if m[1] <= heading.end(1)} or start != first:
                statuses[i] = MentionStatus.NOT_MENTIONED  # the line is about the other structure
            else:
                # findings of no structure ("Gallbladder and bile ducts: gallstones") are the first one's
                statuses[i] = (
                    MentionStatus.UNCERTAIN if MentionStatus.POSITIVE not in others else MentionStatus.POSITIVE
                )
            continue
        if _NEGATIVE_POST.match(line.strip()):
            statuses[i] = MentionStatus.NEGATIVE
        elif MentionStatus.POSITIVE in others or _abnormal_words(
            _blank_negated(sentence, heading.end(), mentions, statuses)
        ):
            statuses[i] = MentionStatus.POSITIVE
        elif MentionStatus.UNCERTAIN in others:
            statuses[i] = MentionStatus.UNCERTAIN
        else:
            statuses[i] = MentionStatus.NEGATIVE
    return statuses


def _restated_in_parentheses(
    sentence: str, mentions: list[tuple[int, int, Entity]], statuses: list[MentionStatus]
) -> list[MentionStatus]:
    """A name of the same entity in parentheses right after another restates it ("treatment-related
    change (pseudoprogression)") and shares its status, which the parenthesis would otherwise cut off."""
    statuses = list(statuses)
    for i in range(1, len(mentions)):
        (_, previous_end, previous), (start, end, entity) = mentions[i - 1], mentions[i]
        if (
            entity is previous
            and re.fullmatch(r"\s*\(\s*", sentence[previous_end:start])
            and re.match(r"\s*\)", sentence[end:])
        ):
            statuses[i] = statuses[i - 1]
    return statuses


def _blank_negated(sentence: str, offset: int, mentions, statuses: list[MentionStatus]) -> str:
    """`sentence[offset:]` with the negated mentions blanked (their words say nothing of the organ)."""
    text = list(sentence)
    for (start, end, _), status in zip(mentions, statuses):
        if status is MentionStatus.NEGATIVE:
            text[start:end] = " " * (end - start)
    return "".join(text)[offset:]


# Between a finding and a hedged naming of it, words that make the naming an alternative, not the finding's name.
_ALTERNATIVES = re.compile(r";|\b(?:differential|ddx|includ\w*|considerations?|versus|vs|alternatives?)\b", re.I)


# A later mention inside a location or a cause ("ulceration of the plaque surface", "secondary to the
# ascites") is not a hedged naming of the finding.
_LOCATED_IN = re.compile(r"\b(?:of|in|at|on|within|along|around|to)\s+(?:the|its|this|that)\s+$", re.I)


def _hedged_evidence(sentence: str, mentions, statuses: list[MentionStatus]) -> list[MentionStatus]:
    """A finding described and then named with a hedge in the same clause ("filling defects ...
    suspicious for PE", "a lesion, likely a hemangioma") is uncertain, not seen for sure."""
    statuses = list(statuses)
    for i, (_, end, entity) in enumerate(mentions):
        if statuses[i] is not MentionStatus.POSITIVE:
            continue
        for (later_start, _, other), status in zip(mentions[i + 1 :], statuses[i + 1 :]):
            between = sentence[end:later_start]
            if _LOCATED_IN.search(between):
                continue
            if other.id == entity.id and status is MentionStatus.UNCERTAIN and not _ALTERNATIVES.search(between):
                statuses[i] = MentionStatus.UNCERTAIN
                break
    return statuses


def sentence_status(sentence: str) -> MentionStatus:
    """The status a sentence gives whatever it mentions (for text already about one entity, such as
    an LLM's extraction that paraphrases the entity's name)."""
    masked = _PSEUDO.sub(lambda m: " " * len(m.group()), sentence)
    if any(pattern.search(masked) for pattern in (_UNCERTAIN_PRE, _UNCERTAIN_POST, _UNCERTAIN_NEXT)):
        return MentionStatus.UNCERTAIN
    if _NEGATIVE_PRE.search(masked) or _NEGATIVE_POST.search(masked):
        return MentionStatus.NEGATIVE
    return MentionStatus.POSITIVE


def aggregate_status(statuses: list[MentionStatus]) -> MentionStatus:
    """A report's verdict on an entity: positive if any mention is, else uncertain, else negative."""
    for status in (MentionStatus.POSITIVE, MentionStatus.UNCERTAIN, MentionStatus.NEGATIVE):
        if status in statuses:
            return status
    return MentionStatus.NOT_MENTIONED


class QuestionEntityFinder:
    """The entity a question is about, for a VLM with entity tokens: a name the user gives,
    resolved in the ontology (id, name, term or synonym), else the first finding the question
    names (matched as report sentences are; longest mention first)."""

    def __init__(self, ontology: Ontology | None = None):
        self.ontology = ontology or Ontology.load()
        self.decomposer = RuleBasedDecomposer(self.ontology)

    def find(self, question: str, modality: str, entity: str | None = None) -> str | None:
        """The entity id, or None when the question names no entity of `modality`."""
        if entity is not None:
            try:
                return self.ontology.find(entity, modality).id
            except KeyError as error:
                message = f"unknown entity {entity!r} for {modality} (see `medreco entities`)"
                raise UnknownEntityError(message) from error
        mentions = self.decomposer.find_mentions(question, self.ontology.entities(modality))
        return mentions[0][2].id if mentions else None


__all__ = [
    "EmptyReportError",
    "EntityStatement",
    "MentionStatus",
    "QuestionEntityFinder",
    "ReportDecomposer",
    "ReportDecomposition",
    "RuleBasedDecomposer",
    "aggregate_status",
    "sentence_status",
    "section_name",
    "split_sections",
    "split_sentences",
    "unheaded_findings",
    "unheaded_findings_beside_an_impression",
    "examination_title",
]
