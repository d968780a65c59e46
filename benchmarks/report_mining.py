"""Report decomposition on the synthetic cohort, against its ground truth.

Prints mention-status accuracy (positive / negative / uncertain / not mentioned), the
entity-specific text's sentence-level precision and recall, the confusion of statuses, and the
accuracy of interval-change labels read from same-patient prior/current reports.

    python benchmarks/report_mining.py [--patients 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import tempfile

from medreco.data.mining.benchmark import score_change_labels, score_decomposition
from medreco.data.phantom import PhantomConfig, generate_cohort
from medreco.data.reports.decomposition import RuleBasedDecomposer


def vqa_statistics(decomposer, cohort: str, pairs_per_modality: int = 1500) -> dict:
    """Generate comparative VQA over study pairs of the cohort and run the filters."""
    import itertools
    from collections import Counter

    from medreco.data.mining.vqa import filter_vqa, vqa_over_pairs
    from medreco.data.phantom import read_manifest

    records = read_manifest(cohort)
    statements = {r.study_id: decomposer.decompose(r.report, r.modality).statements for r in records}
    modality = {r.study_id: r.modality for r in records}
    patient = {r.study_id: r.patient_id for r in records}
    pairs = (
        (a.study_id, b.study_id, patient[a.study_id] == patient[b.study_id])
        for m in ("chest_xray", "chest_ct")
        for a, b in itertools.islice(
            itertools.combinations([r for r in records if r.modality == m], 2), pairs_per_modality
        )
    )
    samples = vqa_over_pairs(pairs, statements, lambda study: decomposer.ontology.entities(modality[study], "abnormal"))
    entity_map = {e.id: e for e in decomposer.ontology.entities()}
    final, report = filter_vqa(samples, statements, entity_map)
    return {"report": report, "dimensions": dict(Counter(s.dimension for s in final))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patients", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cohort:
        generate_cohort(PhantomConfig(num_patients=args.patients, size="tiny", seed=args.seed), cohort, progress=False)
        decomposer = RuleBasedDecomposer()
        scores = score_decomposition(decomposer, cohort)
        changes = score_change_labels(decomposer, cohort)
        vqa = vqa_statistics(decomposer, cohort)
    print(f"(study, finding) pairs: {scores['pairs']}")
    print(f"mention-status accuracy: {scores['status_accuracy']:.3f}")
    print(f"entity text, sentence precision: {scores['span_precision']:.3f}, recall: {scores['span_recall']:.3f}")
    for pair, count in scores["confusion"].items():
        print(f"  {pair:<32} {count}")
    print(f"prior/current finding pairs: {changes['pairs']}, kept after the bidirectional check: {changes['kept']}")
    print(f"change-label accuracy on kept pairs: {changes['accuracy_on_kept']:.3f}")
    for pair, count in changes["confusion"].items():
        print(f"  {pair:<44} {count}")
    report = vqa["report"]
    print(
        f"comparative VQA: {report.generated} generated, {report.after_image_dependency} after image dependency, "
        f"{report.after_duplicates} after duplicates, {report.after_language_prior} after the language prior"
    )
    print(f"share removed by the language-prior filter: {report.language_prior_removed_share:.3f}")
    print(f"questions by dimension: {vqa['dimensions']}")


if __name__ == "__main__":
    main()
