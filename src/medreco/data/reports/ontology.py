"""The clinical entity vocabulary: four modality families, each with anatomical structures,
abnormal findings (which carry their anatomy) and diseases (MedReCo paper, Appendix S2), plus the
synonyms and phrasings used to find them in reports. Users extend it with a JSON file of the
same shape (new entities, or extra synonyms for existing ids)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ...errors import MedReCoError, TextFileError, read_text_file

LEVELS = ("anatomy", "abnormal", "disease")
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
    (plain phrases, or regular expressions prefixed with "re:")."""

    id: str
    family: str
    level: str
    name: str
    term: str
    anatomy: str | None = None
    synonyms: tuple[str, ...] = field(default_factory=tuple)

    @property
    def prompt(self) -> str:
        """The text the model's text encoder reads for this entity."""
        return self.name

    def phrasings(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.term, *self.synonyms)))


class Ontology:
    """Look-ups over the entity vocabulary. `Ontology.load()` reads the packaged vocabulary."""

    def __init__(self, entities: list[Entity], family_modalities: dict[str, list[str]]):
        self._entities = {entity.id: entity for entity in entities}
        self.family_modalities = family_modalities

    @classmethod
    def load(cls, extra: str | Path | None = None) -> Ontology:
        """The packaged vocabulary, extended by `extra` (a JSON file in the same format) if given."""
        data = json.loads(resources.files("medreco.data.reports.resources").joinpath("entities.json").read_text())
        entities, modalities = cls._parse(data)
        ontology = cls(entities, modalities)
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
                merged = tuple(dict.fromkeys(known.synonyms + entity.synonyms))
                entity = Entity(known.id, known.family, known.level, known.name, known.term, known.anatomy, merged)
            self._entities[entity.id] = entity

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
        """An entity by id, name, term or synonym (case-insensitive), within a modality if given."""
        wanted = text.strip().lower()
        wanted_term = re.sub(r"\s*\([^)]*\)", "", wanted).strip()  # "X (e.g., ...)" -> "X"
        candidates = self.entities(modality)
        for attribute, value in (("id", wanted), ("name", wanted), ("term", wanted), ("term", wanted_term)):
            for entity in candidates:
                if getattr(entity, attribute).lower() == value:
                    return entity
        for entity in candidates:
            if wanted in (s.lower() for s in entity.synonyms):
                return entity
        raise KeyError(f"no entity matches {text!r}" + (f" for {modality}" if modality else ""))

    def anatomy_of(self, entity: Entity) -> Entity | None:
        """The anatomy entity an abnormal finding sits in, if the same family lists it."""
        if entity.anatomy is None:
            return None
        for candidate in self.entities(entity.family, "anatomy"):
            if candidate.name.lower() == entity.anatomy.lower():
                return candidate
        return None


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
    "entity_prompts",
]
