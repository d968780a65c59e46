"""The clinical entity vocabulary: four modality families, each with anatomical structures,
abnormal findings (which carry their anatomy) and diseases (MedReCo paper, Appendix S2), plus the
synonyms and phrasings used to find them in reports. Users extend it with a JSON file of the
same shape (new entities, or extra synonyms for existing ids)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from ...errors import MedReCoError, TextFileError, read_text_file

LEVELS = ("anatomy", "abnormal", "disease")
PAPER_VOCABULARY = "entities.json"  # Appendix S2, names exactly as the paper lists them
# Common findings the paper's list lacks (the CheXpert observations among them), and the synonyms,
# abbreviations and word forms routine reports use: loaded unless `paper_only`.
SHIPPED_EXTENSIONS = ("common_findings.json",)
MODALITY_FAMILY = {
    "chest_xray": "CXR",
    "chest_ct": "CT",
    "abdominal_ct": "CT",
    "brain_mri": "BRAIN",
    "ultrasound": "US",
}
# Where modalities share a family, the body region each one's reports are about: a phrasing that names
# an entity only in context ("lymphadenopathy" for the abdominal nodes) reads as that region's in the
# modality's reports, as if every sentence named it ("No lymphadenopathy" on an abdominal CT).
MODALITY_REGION = {"chest_ct": "thoracic", "abdominal_ct": "abdominal"}
# Other names for the canonical modalities (case, spaces, hyphens and underscores do not matter),
# DICOM Modality codes among them. MR is brain MRI: the vocabulary has no other MRI.
MODALITY_ALIASES = {
    "cxr": "chest_xray",
    "chest x-ray": "chest_xray",
    "chest xray": "chest_xray",
    "xray": "chest_xray",
    "x-ray": "chest_xray",
    "CR": "chest_xray",
    "DX": "chest_xray",
    "MR": "brain_mri",
    "MRI": "brain_mri",
    "US": "ultrasound",
}
# Names that fit several canonical modalities: refused, naming the choices.
AMBIGUOUS_MODALITIES = {"CT": ("chest_ct", "abdominal_ct")}


class UnknownModalityError(MedReCoError, ValueError):
    """A modality name that is neither canonical nor an alias of one, or that is ambiguous."""


def _modality_key(name: str) -> str:
    return re.sub(r"[\s_-]+", "_", name.strip().lower())


_MODALITY_LOOKUP = {
    **{_modality_key(alias): canonical for alias, canonical in MODALITY_ALIASES.items()},
    **{_modality_key(canonical): canonical for canonical in MODALITY_FAMILY},
}


def canonical_modality(name: str) -> str:
    """The canonical modality (`chest_xray`, ...) that `name` or its alias (`CXR`, `DX`, `MR`, `US`,
    `chest x-ray`...) stands for; raises `UnknownModalityError` for an unknown or ambiguous name."""
    key = _modality_key(name)
    if key in _MODALITY_LOOKUP:
        return _MODALITY_LOOKUP[key]
    ambiguous = {_modality_key(alias): choices for alias, choices in AMBIGUOUS_MODALITIES.items()}
    if key in ambiguous:
        raise UnknownModalityError(
            f"modality {name!r} is ambiguous: name the body part ({' or '.join(ambiguous[key])})"
        )
    aliases = "; ".join(
        f"{', '.join(a for a, c in MODALITY_ALIASES.items() if c == canonical)} for {canonical}"
        for canonical in dict.fromkeys(MODALITY_ALIASES.values())
    )
    raise UnknownModalityError(
        f"unknown modality {name!r}; allowed: {', '.join(MODALITY_FAMILY)}, or an alias ({aliases})"
    )


@dataclass(frozen=True)
class Description:
    """A finding described rather than named: one of `subjects` (an organ or part, "spleen",
    "pelvicalyceal system") in one of `states` ("enlarged", "dilated"; nouns such as "enlargement"
    for "enlargement of the spleen" and "splenic enlargement"). Negation and hedging apply as to a name.
    A subject in one of `normal_states` ("normal in size", "patent") rules the finding out, and
    reads the other way round when negated ("the portal vein is not patent")."""

    subjects: tuple[str, ...]
    states: tuple[str, ...]
    normal_states: tuple[str, ...] = ()  # states that rule the finding out ("the portal vein is patent")


@dataclass(frozen=True)
class Measurement:
    """A finding given by a size: one of `subjects` measuring more than `abnormal_above` millimetres
    is the finding; up to `normal_up_to` it is absent ("the spleen measures 11 cm"); in between
    the size alone says nothing. `dimension`: which of several dimensions counts ("largest", or
    "smallest" for a lymph node's short axis); `context`: where the limits hold only in some
    sentences (an endometrium's after the menopause); `unit`: "mm", or "ratio" for a fraction such as
    the cardiothoracic ratio (limits written as numbers, sizes read as "0.56" or "56%")."""

    subjects: tuple[str, ...]
    abnormal_above: float
    normal_up_to: float
    dimension: str = "largest"
    context: str | None = None  # a pattern the sentence must match for these limits ("post-?menopausal")
    unit: str = "mm"  # "ratio": a unitless fraction ("CTR 0.56", "cardiothoracic ratio of 48%")

    def verdict(self, sizes_mm: list[float]) -> bool | None:
        """True (the finding), False (normal) or None (between the limits) for a measured size."""
        size = max(sizes_mm) if self.dimension == "largest" else min(sizes_mm)
        if size > self.abnormal_above:
            return True
        return False if size <= self.normal_up_to else None


def _millimetres(text: str, where: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(mm|cm)\s*", text)
    if match is None:
        raise ValueError(f"{where}: a size such as '13 cm' or '7 mm', not {text!r}")
    return measured_sizes(match.group(1), match.group(2))[0]


def _fields(item: dict, block: dict, kind: str, required: tuple[str, ...]) -> None:
    missing = [name for name in required if not block.get(name)] if isinstance(block, dict) else list(required)
    if missing:
        raise ValueError(f"entity {item.get('id')!r}: a {kind} needs {', '.join(missing)}")


def _description(item: dict, block: dict) -> Description:
    _fields(item, block, "description", ("subjects",))
    if not (block.get("states") or block.get("normal_states")):
        raise ValueError(f"entity {item.get('id')!r}: a description needs states or normal_states")
    return Description(tuple(block["subjects"]), tuple(block.get("states", ())), tuple(block.get("normal_states", ())))


def _measurement(item: dict, block: dict) -> Measurement:
    _fields(item, block, "measurement", ("subjects", "abnormal_above", "normal_up_to"))
    where = f"entity {item.get('id')!r}"
    unit = block.get("unit", "mm")
    if unit not in ("mm", "ratio"):
        raise ValueError(f"{where}: a measurement's unit is 'mm' (sizes such as '13 cm') or 'ratio', not {unit!r}")
    limit = _millimetres if unit == "mm" else _ratio
    measurement = Measurement(
        tuple(block["subjects"]),
        limit(block["abnormal_above"], where),
        limit(block["normal_up_to"], where),
        block.get("dimension", "largest"),
        block.get("context"),
        unit,
    )
    if measurement.dimension not in ("largest", "smallest") or measurement.normal_up_to > measurement.abnormal_above:
        raise ValueError(f"{where}: dimension is 'largest' or 'smallest', and normal_up_to <= abnormal_above")
    return measurement


def _ratio(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{where}: a ratio limit is a number between 0 and 1 such as 0.5, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class Entity:
    """id: stable key such as "ct/abnormal/pleural-effusion@pleura"; name: the vocabulary's wording;
    term: the short form; anatomy: where an abnormal finding sits; synonyms: report phrasings
    (plain phrases, or regular expressions prefixed with "re:"); contextual: phrasings that name
    this entity only in a sentence that also matches `context` (a generic "cyst" or "focal lesion"
    in a sentence about the kidney or the liver); descriptions and measurements: how reports
    describe the finding without naming it ("the pelvicalyceal system is dilated", "the spleen
    measures 16 cm")."""

    id: str
    family: str
    level: str
    name: str
    term: str
    anatomy: str | None = None
    synonyms: tuple[str, ...] = field(default_factory=tuple)
    context: str | None = None
    contextual: tuple[str, ...] = field(default_factory=tuple)
    descriptions: tuple[Description, ...] = field(default_factory=tuple)
    measurements: tuple[Measurement, ...] = field(default_factory=tuple)

    @property
    def prompt(self) -> str:
        """The text the model's text encoder reads for this entity."""
        return self.name

    def phrasings(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.term, *self.synonyms)))


# British spellings the vocabulary's American ones also match ("haemorrhage", "oedema", "tumour").
SPELLING_VARIANTS = {
    "hem": "ha?em",
    "edem": "o?edem",
    "esophag": "o?esophag",
    "tumor": "tumou?r",
    "goiter": "goit(?:er|re)",
}
_SPELLING = re.compile("|".join(SPELLING_VARIANTS))
_CONNECTOR = r"(?:\s*,\s*(?:(?:or|and|nor)\s+)?|\s*/\s*|\s+(?:or|and|nor)\s+)"


def _word_pattern(word: str) -> str:
    return _SPELLING.sub(lambda m: SPELLING_VARIANTS[m.group()], re.escape(word))


def phrase_pattern(phrase: str, plural: bool = True) -> str:
    """A vocabulary phrase as a regular expression: words separated by spaces or hyphens, the last
    one also in the plural, British spellings accepted, and a two-word phrase whose modifier heads a
    coordinated list ("pericardial" in "no pericardial or pleural effusion"); phrases prefixed "re:"
    are patterns already."""
    if phrase.startswith("re:"):
        return phrase[3:]
    words = [_word_pattern(w) for w in re.split(r"[\s-]+", phrase.lower().strip())]
    if not plural:
        return r"[\s-]+".join(words)
    last = words[-1]
    if re.search(r"[^aeiou]y$", last):
        words[-1] = last[:-1] + "(?:y|ies)"
    elif re.search(r"[^aeiou]ies$", last):
        words[-1] = last[:-3] + "(?:y|ies)"
    elif re.search(r"(?:x|ch|sh|ss|[^s]is|us)$", last):
        words[-1] = last + "(?:es)?"
    elif re.search(r"(?:ses|xes|ches|shes)$", last):
        words[-1] = last[:-2] + "(?:es)?"
    elif last.endswith("s"):
        words[-1] = last[:-1] + "s?"
    elif last[-1:].isalpha():
        words[-1] = last + "s?"
    pattern = r"[\s-]+".join(words)
    if len(words) == 2 and re.search(r"(?:al|ar|ic|ary|ous)$", words[0]):
        shared_head = rf"{words[0]}(?={_CONNECTOR}(?:[\w-]+(?:{_CONNECTOR}|\s+)){{0,3}}?{words[1]}(?![\w-]))"
        pattern = f"{pattern}|{shared_head}"
    return pattern


# How reports put a subject and its state together. A subject's state follows it ("the spleen is
# enlarged", "the pelvicalyceal system and ureter are dilated", "Spleen: enlarged"), precedes it
# ("enlarged spleen") or names it ("enlargement of the spleen"); a few modifying words may stand
# between, never a verb, a comma or a negation (those belong to the status, which the subject's own
# context decides, as for a name).
_COPULA = (
    r"(?:is|are|was|were|appears?|appearing|remains?|seems?|looks?|shows?|demonstrates?|"
    r"has become|have become|became|has been|have been)"
)
_DEGREE = (
    r"(?:not|no longer|now|again|still|also|both|all|each|somewhat|more|less|further|newly|"
    r"(?!(?:adequately|normally|appropriately|optimally|suboptimally|partially|poorly)\b)[a-z]+ly)"
)
# Another object the words may be about: "the liver lesion is enlarged" is not hepatomegaly.
_OTHER_OBJECT = (
    r"(?:lesions?|cysts?|mass(?:es)?|nodules?|nodes?|stones?|calcul\w*|tumou?rs?|metasta\w+|ha?emangiomas?|"
    r"abscess\w*|collections?|foci|focus|lacerations?|infarcts?|veins?|arter\w+|ducts?|walls?|capsule|hil(?:um|a)|"
    r"lobes?|segments?|vessels?|polyps?|implants?|deposits?)\b"
)
_GAP_WORD = (
    rf"(?!(?:is|are|was|were|be|been|appears?|remains?|seems?|looks?|has|have|had|but|while|whereas|which|"
    rf"who|with|without|no|not|nor|contains?|shows?|demonstrates?|and the|or)\b|{_OTHER_OBJECT})[\w()/'-]+"
)
# Words between a measured subject and its size ("the infrarenal aorta measures up to 5.8 cm in
# maximal diameter", "CBD 9 mm"): positions, axes and verbs only, so another object's size ("the
# spleen contains a cyst of 3 cm") is not the subject's.
_MEASURE_GAP = (
    r"(?:left|right|upper|lower|main|common|proximal|distal|mid|ascending|descending|infrarenal|suprarenal|"
    r"juxtarenal|abdominal|thoracic|craniocaudal|cranio-caudal|bipolar|longitudinal|transverse|sagittal|"
    r"maximal|maximum|max|overall|short[- ]axis|long[- ]axis|length|diameter|span|size|width|calib(?:er|re)|"
    r"in|of|the|its|now|currently|enlarged|dilated|prominent|mildly|moderately|markedly|also|both|each|and)"
)
_MEASURE_VERB = (
    r"(?:measures?|measuring|measured|is|are|was|were|at|of|to|up to|approximately|approx\.?|about|around|~|"
    r"now|dilated|distended|enlarged|spans?|spanning)"
)
_NUMBER = r"\d+(?:\.\d+)?"


def description_patterns(description: Description, normal: bool = False) -> list[str]:
    """Regular expressions for a described finding (its `normal_states` if `normal`). Where the state
    follows its subject the mention is the state (group `state`: "is not [enlarged]" reads negative,
    and the subject stays a mention of its own); else the whole phrase ("no [enlargement of the spleen]")."""
    states = description.normal_states if normal else description.states
    if not states:
        return []
    subject = "|".join(phrase_pattern(s) for s in description.subjects)
    state = "|".join(phrase_pattern(s, plural=False) for s in states)
    return [
        # "the aorta is [calcified]", "is tortuous and [calcified]" (a state after another joined to it)
        rf"(?:{subject})(?:\s+{_GAP_WORD}){{0,5}}?(?:\s*:\s*|\s+{_COPULA}\s+(?:(?!not\b)[\w-]+\s+and\s+)?|\s+)"
        rf"(?:{_DEGREE}\s+){{0,3}}(?P<state>{state})",
        rf"(?:{state})(?:\s+(?:and\s+)?(?!(?:the|an?|this|that|its)\b){_GAP_WORD}){{0,2}}?\s+(?:{subject})(?!\s+{_OTHER_OBJECT})",
        rf"(?:{state})\s+(?:of|in|involving|within)\s+(?:the\s+|both\s+)?(?:[\w-]+\s+){{0,2}}?(?:{subject})(?!\s+{_OTHER_OBJECT})",
    ]


def measurement_pattern(measurement: Measurement) -> str:
    """A regular expression for a measured subject; the match spans the subject, and the groups
    `size` ("16.5", "15 x 12") and `unit` (mm or cm) hold its size (for a ratio, "0.56" and no unit,
    or "56" and "%")."""
    subject = "|".join(phrase_pattern(s) for s in measurement.subjects)
    if measurement.unit == "ratio":
        return (
            rf"(?:{subject})(?=\s*[:,=]?\s*(?:(?:{_MEASURE_VERB}|less than|below|under|<)\s*){{0,3}}"
            rf"(?P<size>0?\.\d+|[1-9]\d(?:\.\d+)?(?=\s*%))\s*(?P<unit>%)?)"
        )
    return (
        rf"(?:{subject})(?=(?:\s+{_MEASURE_GAP}){{0,6}}?\s*[:,]?\s*(?:{_MEASURE_VERB}\s+){{0,3}}"
        rf"(?P<size>{_NUMBER}(?:\s*(?:x|\u00d7|by)\s*{_NUMBER})*)\s*(?P<unit>mm|cm)\b)"
    )


def measured_sizes(size: str, unit: str | None) -> list[float]:
    """The millimetres a measurement's `size` and `unit` groups give ("15 x 12", "cm" -> [150, 120]);
    for a ratio, the fraction ("0.56", None -> [0.56]; "56", "%" -> [0.56])."""
    scale = {"cm": 10.0, "%": 0.01}.get((unit or "").lower(), 1.0)
    return [float(number) * scale for number in re.findall(_NUMBER, size)]


# Words that place a finding without changing what it is: sides, lobes, zones, ribs. ("New" is not
# one: "no new nodules" says nothing of the old.)
_QUALIFIERS = re.compile(
    r"^(?:(?:(?:left|right)(?!\s+(?:ventric|atri|heart|cardiac|coronary|main|hemi|sided))|bilateral|both|"
    r"left-sided|right-sided|ipsilateral|contralateral|"
    r"(?:upper|middle|mid|lower)(?: lobe| zone)?|lingular|basilar|bibasilar|basal|apical|biapical|"
    r"\d+(?:st|nd|rd|th)(?:\s*(?:-|to|and)\s*\d+(?:st|nd|rd|th))?)\s+)+",
    re.I,
)


class Ontology:
    """Look-ups over the entity vocabulary. `Ontology.load()` reads the packaged vocabulary."""

    def __init__(self, entities: list[Entity], family_modalities: dict[str, list[str]]):
        self._entities = {entity.id: entity for entity in entities}
        self.family_modalities = family_modalities
        self._anatomy: dict[tuple[str, str], Entity] | None = None  # (family, name) -> structure, built on use
        self._phrasing_patterns: dict[str, tuple[re.Pattern, ...]] = {}  # entity id -> compiled, built on use

    @classmethod
    def load(cls, extra: str | Path | None = None, paper_only: bool = False) -> Ontology:
        """The packaged vocabulary (the paper's entities plus the shipped extension of common findings
        and report phrasings; `paper_only=True` for the paper's list alone), extended by `extra`
        (a JSON file in the same format) if given."""
        packaged = resources.files("medreco.data.reports.resources")
        entities, modalities = cls._parse(json.loads(packaged.joinpath(PAPER_VOCABULARY).read_text()))
        ontology = cls(entities, modalities)
        if not paper_only:
            for name in SHIPPED_EXTENSIONS:
                ontology.extend(json.loads(packaged.joinpath(name).read_text()))
        if extra is not None:
            try:
                ontology.extend(json.loads(read_text_file(extra, "vocabulary (JSON)")))
            except TextFileError:
                raise
            except json.JSONDecodeError as error:
                raise TextFileError(f"{extra}: not valid JSON ({error.msg}, line {error.lineno})") from None
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise TextFileError(f"{extra}: not a vocabulary extension ({error})") from None
        return ontology

    @staticmethod
    def _parse(data: dict) -> tuple[list[Entity], dict[str, list[str]]]:
        entities, modalities = [], {}
        for family, block in data.get("families", {}).items():
            modalities[family] = list(block.get("modalities", []))
            for item in block.get("entities", []):
                if item.get("level") not in LEVELS:
                    raise ValueError(f"entity {item.get('id')!r}: level must be one of {LEVELS}")
                entities.append(
                    Entity(
                        id=item["id"],
                        family=family,
                        level=item["level"],
                        name=item["name"],
                        term=item.get("term", item["name"].lower()),
                        anatomy=item.get("anatomy"),
                        synonyms=tuple(item.get("synonyms", ())),
                        context=item.get("context"),
                        contextual=tuple(item.get("contextual", ())),
                        descriptions=tuple(_description(item, d) for d in item.get("descriptions", ())),
                        measurements=tuple(_measurement(item, m) for m in item.get("measurements", ())),
                    )
                )
        return entities, modalities

    def extend(self, data: dict) -> None:
        """Add entities, or add synonyms to existing ones (same id)."""
        entities, modalities = self._parse(data)
        for family, names in modalities.items():
            self.family_modalities.setdefault(family, [])
            self.family_modalities[family] = list(dict.fromkeys(self.family_modalities[family] + names))
        for entity in entities:
            known = self._entities.get(entity.id)
            if known is not None:
                entity = replace(
                    known,
                    synonyms=tuple(dict.fromkeys(known.synonyms + entity.synonyms)),
                    context=entity.context or known.context,
                    contextual=tuple(dict.fromkeys(known.contextual + entity.contextual)),
                    descriptions=tuple(dict.fromkeys(known.descriptions + entity.descriptions)),
                    measurements=tuple(dict.fromkeys(known.measurements + entity.measurements)),
                )
            self._entities[entity.id] = entity
            self._phrasing_patterns.pop(entity.id, None)
            self._anatomy = None

    def __len__(self) -> int:
        return len(self._entities)

    def __getitem__(self, entity_id: str) -> Entity:
        try:
            return self._entities[entity_id]
        except KeyError:
            raise KeyError(f"no entity {entity_id!r} in the vocabulary") from None

    @property
    def families(self) -> list[str]:
        return list(self.family_modalities)

    def family_of(self, modality: str) -> str:
        """The vocabulary family of a modality (`chest_ct` -> `CT`); family names pass through."""
        if modality in self.family_modalities:
            return modality
        for family, modalities in self.family_modalities.items():
            if modality in modalities:
                return family
        raise ValueError(f"no entity family for modality {modality!r}; known: {sorted(MODALITY_FAMILY)}")

    def entities(self, modality: str | None = None, level: str | None = None) -> list[Entity]:
        family = self.family_of(modality) if modality else None
        return [
            e
            for e in self._entities.values()
            if (family is None or e.family == family) and (level is None or e.level == level)
        ]

    def find(self, text: str, modality: str | None = None) -> Entity:
        """An entity by id, name, term or synonym (case-insensitive), within a modality if given; else
        by a phrasing that names an entity in the modality's region (`MODALITY_REGION`: "lymphadenopathy"
        on abdominal CT), a synonym, word form or pattern, a contextual phrasing only one entity has, or
        the name of a finding without its side or lobe ("left hydronephrosis"). `KeyError` if none."""
        wanted = text.strip().lower()
        wanted_term = re.sub(r"\s*\([^)]*\)", "", wanted).strip()  # "X (e.g., ...)" -> "X"
        candidates = self.entities(modality)
        for attribute, value in (("id", wanted), ("name", wanted), ("term", wanted), ("term", wanted_term)):
            for entity in candidates:
                if getattr(entity, attribute).lower() == value:
                    return entity
        # a phrasing that names an entity in the modality's region ("lymphadenopathy" on abdominal CT)
        region = MODALITY_REGION.get(modality or "", "")
        regional = [
            e
            for e in candidates
            if region
            and e.context
            and re.search(e.context, region, re.I)
            and wanted in (s.lower() for s in e.contextual)
        ]
        if len(regional) == 1:
            return regional[0]
        # a synonym, then word forms, spellings and patterns as report sentences are matched; where
        # several entities share a phrasing, the one a report sentence would give (abnormal first)
        by_level = sorted(candidates, key=lambda e: ("abnormal", "disease", "anatomy").index(e.level))
        for matches in (
            lambda e: wanted in (s.lower() for s in e.synonyms),
            lambda e: any(pattern.fullmatch(wanted) for pattern in self._patterns_of(e)),
        ):
            for entity in by_level:
                if matches(entity):
                    return entity
        # a phrasing that names an entity only in context ("infection" in a sentence about the lungs),
        # when exactly one entity has it
        contextual = [e for e in candidates if wanted in (s.lower() for s in e.contextual)]
        if len(contextual) == 1:
            return contextual[0]
        # a finding qualified by side or lobe ("left hydronephrosis", "right lower lobe nodule"): the
        # finding without them. Not a structure: "left lung" is a part of the lungs, which the
        # vocabulary does not split (a report's "left lung clear" says nothing of the right)
        unqualified = _QUALIFIERS.sub("", wanted_term).strip()
        if unqualified and unqualified != wanted_term:
            try:
                entity = self.find(unqualified, modality)
            except KeyError:
                entity = None
            if entity is not None and entity.level != "anatomy":
                return entity
        raise KeyError(f"no entity matches {text!r}" + (f" for {modality}" if modality else ""))

    def _patterns_of(self, entity: Entity) -> tuple[re.Pattern, ...]:
        # compiled once per entity: re's own cache holds 512 patterns, the vocabulary ~18,000
        patterns = self._phrasing_patterns.get(entity.id)
        if patterns is None:
            patterns = tuple(re.compile(phrase_pattern(p), re.I) for p in entity.phrasings())
            self._phrasing_patterns[entity.id] = patterns
        return patterns

    def anatomy_of(self, entity: Entity) -> Entity | None:
        """The anatomy entity an abnormal finding sits in, if the same family lists it."""
        if entity.anatomy is None:
            return None
        if self._anatomy is None:
            self._anatomy = {}
            for candidate in reversed(self.entities(level="anatomy")):  # the first listed wins, as before
                self._anatomy[(candidate.family, candidate.name.lower())] = candidate
        return self._anatomy.get((entity.family, entity.anatomy.lower()))


def entity_prompts() -> dict[str, str]:
    """entity id -> the text the model's text encoder reads for it, over the packaged vocabulary."""
    return {entity.id: entity.prompt for entity in Ontology.load().entities()}


__all__ = [
    "AMBIGUOUS_MODALITIES",
    "Description",
    "Measurement",
    "LEVELS",
    "MODALITY_ALIASES",
    "MODALITY_FAMILY",
    "MODALITY_REGION",
    "Entity",
    "Ontology",
    "UnknownModalityError",
    "canonical_modality",
    "phrase_pattern",
    "description_patterns",
    "measurement_pattern",
    "measured_sizes",
    "entity_prompts",
]
