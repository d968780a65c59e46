"""The package's own metrics as local Hugging Face `evaluate` modules, loadable offline.

`evaluate.load("bleu")` fetches its script from the Hub; a module on disk needs nothing else:

```python
>>> import evaluate
>>> from medreco.evaluation.hf_metrics import metric_path
>>> accuracy = evaluate.load(metric_path("closed_vqa_accuracy"))
>>> accuracy.compute(predictions=["A", "B", "B"], references=["A", "B", "C"])["accuracy"]
0.6666666666666666
```

Each folder holds one module (`<name>/<name>.py`, as `evaluate.load(path)` expects) whose `_compute`
calls the package's own function, so the two never disagree:
- `closed_vqa_accuracy`: predicted option letters against the right ones:
  `medreco.evaluation.vqa.accuracy_summary` (accuracy, count, 95% Wilson interval);
- `ranking_at_k`: ranked study ids against the relevant ones: `medreco.evaluation.metrics.mean_ranking_scores`
  (Recall@k and NDCG@k, mean over queries);
- `entity_f1`: answers against reference answers, with each pair's modality:
  `medreco.evaluation.text.entity_f1` (micro precision, recall and F1 of the clinical facts)."""

from __future__ import annotations

from pathlib import Path

METRICS = ("closed_vqa_accuracy", "ranking_at_k", "entity_f1")
CITATION = "the MedReCo paper and medreco (CITATION.cff)"


def metric_info(description: str, inputs_description: str, columns: dict[str, str]):
    """The `evaluate.MetricInfo` of one of the modules: `columns` maps each input to "string" or
    "strings" (a list of strings per example)."""
    import datasets
    import evaluate

    string = datasets.Value("string")
    features = {name: datasets.Sequence(string) if kind == "strings" else string for name, kind in columns.items()}
    return evaluate.MetricInfo(
        description=description,
        citation=CITATION,
        inputs_description=inputs_description,
        features=datasets.Features(features),
    )


def metric_path(name: str) -> str:
    """The folder of the `evaluate` module `name` (one of `METRICS`), for `evaluate.load(...)`."""
    if name not in METRICS:
        raise ValueError(f"no medreco metric {name!r}; there are {', '.join(METRICS)}")
    return str(Path(__file__).resolve().parent / name)


__all__ = ["METRICS", "metric_info", "metric_path"]
