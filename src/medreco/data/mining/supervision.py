"""Retrieval supervision from report agreement: anchor-positive-negative triplets per modality and
entity, and retrieval test sets (queries, gallery, relevant items). Studies are paired only
within their split (MedReCo Table S2)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from ..reports.statement import EntityStatement, MentionStatus, ReportDecomposition
from .similarity import ReportSimilarity
from .splits import check_sample


@dataclass(frozen=True)
class StudyInfo:
    study_id: str
    patient_id: str
    modality: str
    split: str


@dataclass(frozen=True)
class Triplet:
    anchor: str
    positive: str
    negative: str
    entity_id: str
    modality: str
    split: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RetrievalQuery:
    query: str
    entity_id: str
    modality: str
    split: str
    gallery: list[str]
    relevant: list[str]
    # studies whose statements the thresholds call negative; the rest of the gallery is silent on
    # the entity or in between the thresholds: irrelevant for evaluation, unknown for training
    irrelevant: list[str]


def _groups(studies: dict[str, StudyInfo]) -> dict[tuple[str, str], list[str]]:
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for info in studies.values():
        groups[(info.modality, info.split)].append(info.study_id)
    return groups


def _relevance_for_entity(
    decompositions: dict[str, ReportDecomposition], members: list[str], entity_id: str, similarity: ReportSimilarity
) -> tuple[list[str], np.ndarray]:
    statements: list[EntityStatement] = []
    mentioned = []
    for study in members:
        statement = decompositions[study].statements.get(entity_id)
        if statement is not None and statement.status in (MentionStatus.POSITIVE, MentionStatus.NEGATIVE):
            mentioned.append(study)
            statements.append(statement)
    if len(mentioned) < 2:
        return mentioned, np.zeros((len(mentioned), len(mentioned)), dtype=np.int64)
    relevance = similarity.relevance(statements, statements)
    relevance[np.eye(len(mentioned), dtype=bool)] = -1
    return mentioned, relevance


def build_triplets(
    decompositions: dict[str, ReportDecomposition],
    studies: dict[str, StudyInfo],
    entity_ids: list[str],
    similarity: ReportSimilarity,
    per_anchor: int = 2,
    seed: int = 0,
    exclude_same_patient: bool = True,
) -> list[Triplet]:
    """Triplets (anchor, positive, negative) for each entity, within each modality and split.
    Same-patient candidates are excluded by default (retrieval looks for *other* patients' cases)."""
    rng = np.random.default_rng(seed)
    split_of = {s: info.split for s, info in studies.items()}
    triplets = []
    for (modality, split), members in sorted(_groups(studies).items()):
        for entity_id in entity_ids:
            mentioned, relevance = _relevance_for_entity(decompositions, members, entity_id, similarity)
            if exclude_same_patient and mentioned:
                patients = np.array([studies[s].patient_id for s in mentioned])
                relevance[patients[:, None] == patients[None, :]] = -1
            for i, anchor in enumerate(mentioned):
                positives, negatives = np.flatnonzero(relevance[i] == 1), np.flatnonzero(relevance[i] == 0)
                if not len(positives) or not len(negatives):
                    continue
                for _ in range(per_anchor):
                    triplet = Triplet(
                        anchor,
                        mentioned[rng.choice(positives)],
                        mentioned[rng.choice(negatives)],
                        entity_id,
                        modality,
                        split,
                    )
                    check_sample([triplet.anchor, triplet.positive, triplet.negative], split_of, "triplet")
                    triplets.append(triplet)
    return list(dict.fromkeys(triplets))


def build_retrieval_queries(
    decompositions: dict[str, ReportDecomposition],
    studies: dict[str, StudyInfo],
    entity_ids: list[str],
    similarity: ReportSimilarity,
    split: str = "test",
    min_relevant: int = 1,
) -> list[RetrievalQuery]:
    """For each study of `split` and entity it mentions: the gallery (other patients' studies of the
    same modality and split) and which of them are relevant (positive under the thresholds)."""
    queries = []
    for (modality, group_split), members in sorted(_groups(studies).items()):
        if group_split != split:
            continue
        for entity_id in entity_ids:
            mentioned, relevance = _relevance_for_entity(decompositions, members, entity_id, similarity)
            for i, query in enumerate(mentioned):
                patient = studies[query].patient_id
                gallery = [s for s in members if studies[s].patient_id != patient]
                relevant, irrelevant = (
                    [
                        mentioned[j]
                        for j in np.flatnonzero(relevance[i] == label)
                        if studies[mentioned[j]].patient_id != patient
                    ]
                    for label in (1, 0)
                )
                if len(relevant) >= min_relevant:
                    queries.append(RetrievalQuery(query, entity_id, modality, split, gallery, relevant, irrelevant))
    return queries


__all__ = ["RetrievalQuery", "StudyInfo", "Triplet", "build_retrieval_queries", "build_triplets"]
