"""Which mined questions an image can answer, where the archive knows it.

An archive that records what its images show puts `answerability.json` beside its manifest (the
synthetic cohort does: `medreco.data.phantom.answerability` describes the format). Mining then
writes two more columns into the `vqa`, `vqa_removed` and `longitudinal` tables:
`image_answerable` (True when the images determine the answer, False when only the report does)
and `answerability_reason` (why not; "" otherwise). Without the file, as on a real archive, the
columns are absent and the evaluation says that nothing is known."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import MedReCoError, read_text_file

ANSWERABILITY_FILE = "answerability.json"
SUPPORTED_FORMAT = 1


class AnswerabilityFileError(MedReCoError, ValueError):
    """An `answerability.json` that cannot be read or is not of the documented form; names the file."""


@dataclass(frozen=True)
class Answerability:
    """modality -> entity id -> dimension -> reason ("" when an image shows it); what is not listed
    is report-only with the reason `not_listed`."""

    modalities: dict[str, dict[str, dict[str, str]]]
    not_listed: str
    sha256: str = ""

    @classmethod
    def read(cls, path: str | Path) -> Answerability:
        text = read_text_file(path, "answerability file")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise AnswerabilityFileError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
        if not isinstance(data, dict) or data.get("format") != SUPPORTED_FORMAT:
            raise AnswerabilityFileError(f"{path}: not an answerability table of format {SUPPORTED_FORMAT}")
        modalities = data.get("modalities")
        valid = isinstance(modalities, dict) and all(
            isinstance(entities, dict)
            and all(
                isinstance(dimensions, dict) and all(isinstance(r, str) for r in dimensions.values())
                for dimensions in entities.values()
            )
            for entities in modalities.values()
        )
        if not valid:
            raise AnswerabilityFileError(f"{path}: 'modalities' must map modality -> entity -> dimension -> reason")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cls(modalities, str(data.get("not_listed") or "not recorded as shown by the images"), digest)

    @classmethod
    def beside(cls, manifest: str | Path) -> Answerability | None:
        """The table in the manifest's folder, or None when the archive records none."""
        path = Path(manifest).parent / ANSWERABILITY_FILE
        return cls.read(path) if path.exists() else None

    def reason(self, modality: str, entity_id: str, dimension: str, attribute: str | None = None) -> str:
        """Why an image cannot answer the question ("" when it can). Change questions are looked up by
        the changed attribute (`change:<attribute>`)."""
        key = f"change:{attribute}" if dimension == "change" and attribute else dimension
        dimensions = self.modalities.get(modality, {}).get(entity_id)
        if dimensions is None:
            return self.not_listed
        return dimensions.get(key, self.not_listed)

    def columns(self, modality: str, entity_id: str, dimension: str, attribute: str | None = None) -> dict:
        """The two table columns for one question."""
        reason = self.reason(modality, entity_id, dimension, attribute)
        return {"image_answerable": not reason, "answerability_reason": reason}

    def summary(self) -> dict:
        return {"file": ANSWERABILITY_FILE, "sha256": self.sha256}


__all__ = ["ANSWERABILITY_FILE", "Answerability", "AnswerabilityFileError"]
