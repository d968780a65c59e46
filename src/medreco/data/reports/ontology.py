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
class Entity:
    """id: stable key such as "ct/abnormal/pleural-effusion@pleura"; name: the vocabulary's wording;
    term: the short form; anatomy: where an abnormal finding sits; synonyms: report phrasings
    (plain phrases, or regular expressions prefixed with "re:"); contextual: phrasings that name
    this entity only in a sentence that also matches `context` (a generic "cyst" or "focal lesion"
    in a sentence about the kidney or the liver)."""

    id: str
    family: str
    level: str
    name: str
    term: str
    anatomy: str | None = None
    synonyms: tuple[str, ...] = field(default_factory=tuple)
    context: str | None = None
    contextual: tuple[str, ...] = field(default_factory=tuple)

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


def phrase_pattern(phrase: str) -> str:
    """A vocabulary phrase as a regular expression: words separated by spaces or hyphens, the last
    one also in the plural, British spellings accepted, and a two-word phrase whose modifier heads a
    coordinated list ("pericardial" in "no pericardial or pleural effusion"); phrases prefixed "re:"
    are patterns already."""
    if phrase.startswith("re:"):
        return phrase[3:]
    words = [_word_pattern(w) for w in re.split(r"[\s-]+", phrase.lower().strip())]
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


class Ontology:
    """Look-ups over the entity vocabulary. `Ontology.load()` reads the packaged vocabulary."""

    def __init__(self, entities: list[Entity], family_modalities: dict[str, list[str]]):
        self._entities = {entity.id: entity for entity in entities}
        self.family_modalities = family_modalities
        self._anatomy: dict[tuple[str, str], Entity] | None = None  # (family, name) -> structure, built on use

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
            except json.JSONDecodeError as error:
                raise TextFileError(f"{extra}: not valid JSON ({error.msg}, line {error.lineno})") from None
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
                )
            self._entities[entity.id] = entity
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
        by a contextual phrasing only one entity has."""
        wanted = text.strip().lower()
        wanted_term = re.sub(r"\s*\([^)]*\)", "", wanted).strip()  # "X (e.g., ...)" -> "X"
        candidates = self.entities(modality)
        for attribute, value in (("id", wanted), ("name", wanted), ("term", wanted), ("term", wanted_term)):
            for entity in candidates:
                if getattr(entity, attribute).lower() == value:
                    return entity
        # a synonym, then word forms, spellings and patterns as report sentences are matched; where
        # several entities share a phrasing, the one a report sentence would give (abnormal first)
        by_level = sorted(candidates, key=lambda e: ("abnormal", "disease", "anatomy").index(e.level))
        for matches in (
            lambda e: wanted in (s.lower() for s in e.synonyms),
            lambda e: any(re.fullmatch(phrase_pattern(p), wanted, re.I) for p in e.phrasings()),
        ):
            for entity in by_level:
                if matches(entity):
                    return entity
        # a phrasing that names an entity only in context ("infection" in a sentence about the lungs),
        # when exactly one entity has it
        contextual = [e for e in candidates if wanted in (s.lower() for s in e.contextual)]
        if len(contextual) == 1:
            return contextual[0]
        raise KeyError(f"no entity matches {text!r}" + (f" for {modality}" if modality else ""))

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
    "LEVELS",
    "MODALITY_ALIASES",
    "MODALITY_FAMILY",
    "Entity",
    "Ontology",
    "UnknownModalityError",
    "canonical_modality",
    "phrase_pattern",
    "entity_prompts",
]
