"""Report decomposition on the synthetic cohort, against its ground truth.

Prints mention-status accuracy (positive / negative / uncertain / not mentioned), the
entity-specific text's sentence-level precision and recall, the confusion of statuses, and the
accuracy of interval-change labels read from same-patient prior/current reports.

    python benchmarks/report_mining.py [--patients 100] [--seed 0]

With --throughput N it measures decomposition at scale instead: N synthetic reports (the
synthetic cohort's report writer, no images), decomposed by `medreco mine`'s rule-based step with
1 worker (the baseline), with 2 worker processes, and as 2 shards run at once (two scheduler
tasks, `mine_shard`), each configuration in a fresh process: reports/second and peak resident
memory (the largest process: ru_maxrss of the run and of its children).

    nice python benchmarks/report_mining.py --throughput 100000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from medreco.data.mining.scoring import score_change_labels, score_decomposition
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


def synthetic_manifest(path: Path, reports: int, seed: int = 0) -> None:
    """A manifest of `reports` synthetic reports: per patient, a chest radiograph and a chest CT
    timeline of two studies each (prior and follow-up, with interval changes); no images."""
    import numpy as np

    from medreco.data.phantom.findings import evolve, finding_types_for, sample_finding
    from medreco.data.phantom.reports import write_report

    with open(path, "w") as handle:
        written, patient = 0, 0
        while written < reports:
            rng = np.random.default_rng([seed, patient])
            for modality in ("chest_xray", "chest_ct"):
                findings = [
                    sample_finding(t.key, rng, rng.random() < t.prevalence) for t in finding_types_for(modality)
                ]
                prior = None
                for day in (0, 90):
                    if written == reports:
                        break
                    changes = None
                    if prior is not None:
                        evolved = [evolve(f, rng) for f in prior]
                        findings = [f for f, _ in evolved]
                        changes = {f.key: c for f, (_, c) in zip(prior, evolved) if c is not None}
                    text, _ = write_report(modality, findings, rng, prior, changes, day or None)
                    row = {"image": "none.png", "report": text, "patient_id": f"P{patient:06d}", "modality": modality}
                    handle.write(json.dumps({**row, "study_id": f"S{written:07d}", "study_day": day}) + "\n")
                    written, prior = written + 1, findings
            patient += 1


def _peak_rss_mb() -> float:
    """The largest resident set of this process and of its finished children, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024  # Linux: kilobytes


def _run_one(kind: str, manifest: str, out: str) -> None:
    """One measured configuration, in this (fresh) process; prints its seconds and peak memory."""
    from medreco.data.mining import MiningConfig, Shard, decompose_all, mine_shard, read_study_manifest

    rows = read_study_manifest(manifest)
    start = time.perf_counter()
    if kind.startswith("shard"):
        mine_shard(manifest, out, MiningConfig(), Shard(int(kind.split(":")[1]), 2), progress=False)
    else:
        decompose_all(rows, Path(out) / "decompositions.jsonl", workers=int(kind.split(":")[1]), progress=False)
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss_mb": _peak_rss_mb()}))


def _measure(kinds: list[str], manifest: Path, work: Path) -> dict:
    """Run `kinds` as concurrent processes (one each), as a scheduler would: the wall time with
    their start (imports, reading the manifest), the slowest one's decomposition time, and the
    largest peak memory among them."""
    start = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--run-one", kind, str(manifest), str(work / kind.replace(":", "-"))],
            stdout=subprocess.PIPE,
            text=True,
        )
        for kind in kinds
    ]
    results = []
    for process in processes:
        output, _ = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{kinds}: a measured process failed ({process.returncode})")
        results.append(json.loads(output.strip().splitlines()[-1]))
    return {
        "wall": time.perf_counter() - start,
        "seconds": max(r["seconds"] for r in results),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
    }


def throughput(reports: int, seed: int) -> None:
    """Decomposition throughput and peak memory: 1 worker (baseline), 2 workers, 2 shards at once."""
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        manifest = work / "manifest.jsonl"
        start = time.perf_counter()
        synthetic_manifest(manifest, reports, seed)
        print(f"{reports:,} synthetic reports written in {time.perf_counter() - start:.0f} s")
        configurations = {
            "1 worker (baseline)": ["workers:1"],
            "2 workers": ["workers:2"],
            "2 shards at once (mine --shard 0/2, 1/2)": ["shard:0", "shard:1"],
        }
        baseline = None
        print("| configuration | decomposition s | reports/s | speed-up | wall s (with start) | peak RSS |")
        print("|---|---|---|---|---|---|")
        for name, kinds in configurations.items():
            result = _measure(kinds, manifest, work)
            rate = reports / result["seconds"]
            baseline = baseline or rate
            print(
                f"| {name} | {result['seconds']:.1f} | {rate:.0f} | {rate / baseline:.2f}x | {result['wall']:.0f} | "
                f"{result['peak_rss_mb']:.0f} MB |",
                flush=True,
            )


def main() -> None:
    if sys.argv[1:2] == ["--run-one"]:
        return _run_one(*sys.argv[2:5])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patients", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--throughput", type=int, metavar="N", help="measure decomposition of N synthetic reports")
    args = parser.parse_args()
    if args.throughput:
        return throughput(args.throughput, args.seed)
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
