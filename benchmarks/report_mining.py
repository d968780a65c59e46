"""Report decomposition on the synthetic cohort, against its ground truth.

Prints mention-status accuracy (positive / negative / uncertain / not mentioned), the
entity-specific text's sentence-level precision and recall, the confusion of statuses, and the
accuracy of interval-change labels read from same-patient prior/current reports.

    python benchmarks/report_mining.py [--patients 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import tempfile

from medreco.data.decomposition import RuleBasedDecomposer
from medreco.data.mining_benchmark import score_change_labels, score_decomposition
from medreco.data.phantom import PhantomConfig, generate_cohort


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
    print(f"(study, finding) pairs: {scores['pairs']}")
    print(f"mention-status accuracy: {scores['status_accuracy']:.3f}")
    print(f"entity text, sentence precision: {scores['span_precision']:.3f}, recall: {scores['span_recall']:.3f}")
    for pair, count in scores["confusion"].items():
        print(f"  {pair:<32} {count}")
    print(f"prior/current finding pairs: {changes['pairs']}, kept after the bidirectional check: {changes['kept']}")
    print(f"change-label accuracy on kept pairs: {changes['accuracy_on_kept']:.3f}")
    for pair, count in changes["confusion"].items():
        print(f"  {pair:<44} {count}")


if __name__ == "__main__":
    main()
