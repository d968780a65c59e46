"""The demo's outputs for people: `metrics.json`, `report.md`, `report.html` (the Markdown rendered,
figures embedded) and figures (Recall@k bars for entity vs holistic retrieval, the retrieval montage
with attention heat-maps, the confusion matrix of change labels). Files are written atomically."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from ..atomic import save_figure, write_text_atomically
from .report_comparison import MODALITY_NAMES, answerability_lines, answerability_plot, percent, probe_lines
from .report_headline import headline_lines, headline_plot, headlines
from .report_negation import negation_lines, trend_lines
from .report_temporal import temporal_lines

SYSTEMS = ("entity", "entity+rerank", "holistic")


def recall_bars(retrieval: dict, path: Path) -> Path:
    """Recall@1/3/5 per modality (all entity levels), one bar per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modalities = [m for m in retrieval if m != "all"] + ["all"]
    figure, axes = plt.subplots(1, len(modalities), figsize=(4.2 * len(modalities), 3.4), squeeze=False)
    for axis, modality in zip(axes[0], modalities):
        entry = retrieval[modality]["all"]
        systems = [s for s in SYSTEMS if s in entry]
        width = 0.8 / len(systems)
        for offset, system in enumerate(systems):
            values = [entry[system][f"recall@{k}"] for k in (1, 3, 5)]
            # an interval that does not quite reach its estimate (rounding, few queries) draws as zero length
            low = [max(0.0, v - entry[system][f"recall@{k}_ci95"][0]) for v, k in zip(values, (1, 3, 5))]
            high = [max(0.0, entry[system][f"recall@{k}_ci95"][1] - v) for v, k in zip(values, (1, 3, 5))]
            positions = [k + (offset - (len(systems) - 1) / 2) * width for k in range(3)]
            axis.bar(positions, values, width, yerr=[low, high], capsize=2, label=system)
        if "chance" in entry:
            chance = [entry["chance"][f"recall@{k}"] for k in (1, 3, 5)]
            axis.scatter(range(3), chance, marker="_", s=900, color="black", zorder=3, label="chance")
        axis.set_xticks(range(3), ["R@1", "R@3", "R@5"])
        axis.set_ylim(0, 1)
        axis.set_title(f"{modality} (n={entry['queries']})", fontsize=10)
    axes[0][0].set_ylabel("recall (95% Wilson CI)")
    axes[0][-1].legend(fontsize=8, loc="upper left")
    return save_figure(figure, path)


def confusion_plot(confusion: dict, path: Path) -> Path:
    """Change-label confusion matrix: true label (rows) against the model's answer (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels, matrix = confusion["labels"], np.array(confusion["matrix"])
    figure, axis = plt.subplots(figsize=(5.4, 4.6))
    axis.imshow(matrix, cmap="Blues")
    for i in range(len(labels)):
        for j in range(len(labels)):
            axis.text(j, i, int(matrix[i, j]), ha="center", va="center", fontsize=8)
    short = [label.replace("qualitatively changed", "changed") for label in labels]
    axis.set_xticks(range(len(labels)), short, rotation=40, ha="right", fontsize=8)
    axis.set_yticks(range(len(labels)), short, fontsize=8)
    axis.set_xlabel("model's answer")
    axis.set_ylabel("true change (from the reports)")
    return save_figure(figure, path)


def _clustered_sentence(label: str, test: dict) -> str:
    low, high = test["interval"]
    return (
        f"Patient-clustered ({label}): difference {100 * test['difference']:+.1f} points, 95% cluster-bootstrap "
        f"interval [{100 * low:+.1f}, {100 * high:+.1f}], sign-flip permutation p = {test['p_value']:.3g} "
        f"over {test['clusters']} patients (McNemar treats every question as independent)."
    )


def _filtered_splits(metrics: dict) -> str:
    """Which splits the run's language-prior filter judged, in words."""
    splits = metrics.get("run", {}).get("mined", {}).get("vqa_language_prior_splits")
    if splits is None:
        return "splits not recorded"
    return f"which judged the {', '.join(splits)} split{'s' if len(splits) > 1 else ''}" if splits else "not applied"


def markdown_report(metrics: dict) -> str:
    """The report as Markdown (tables and links to the figures)."""
    sections = (
        _overview_lines,
        headline_lines,
        _montage_lines,
        _full_results_lines,
        _retrieval_lines,
        _expert_lines,
        _entity_retrieval_lines,
        _closed_vqa_lines,
        answerability_lines,
        probe_lines,
        negation_lines,
        trend_lines,
        _open_ended_lines,
        _longitudinal_lines,
        temporal_lines,
        _wall_time_and_model_lines,
    )
    lines = [line for section in sections for line in section(metrics)]
    return "\n".join(lines) + "\n"


# How the report names the VQA scorings and baselines
_SCORINGS = {
    "letter": "MedReCo-VLM (images + question; option letter)",
    "answer": "MedReCo-VLM (images + question; answer likelihood)",
    "answer_mean": "MedReCo-VLM (images + question; answer likelihood per token)",
}
_BASELINE_NAMES = {
    "text_only": "text-only baseline (question only)",
    "majority": "majority answer (most often right option)",
}


def _overview_lines(metrics: dict) -> list[str]:
    """Title and the cohort the run used, as it was: its patients, studies and modalities."""
    run = metrics.get("run", {})
    config = run.get("config", {})
    mined = run.get("mined", {})
    modalities = [MODALITY_NAMES.get(m, m) for m in metrics.get("retrieval", {}) if m != "all"]
    return [
        "# MedReCo demo on the synthetic cohort",
        "",
        f"{config.get('patients', '?')} synthetic patients, {mined.get('studies', '?')} studies "
        f"({', '.join(modalities) or 'modalities not recorded'}); every figure on the held-out test patients. "
        f"Mode: {'quick (too short to learn: a check of the pipeline)' if config.get('quick') else 'default'}.",
        "",
    ]


FULL_RESULTS = "Full results"


def _full_results_lines(metrics: dict) -> list[str]:
    """Where the full tables begin (collapsed in the HTML page)."""
    return [f"## {FULL_RESULTS}", "", "Every table of the run, by part of the system.", ""]


def _retrieval_lines(metrics: dict) -> list[str]:
    """Recall@k and NDCG per modality, level and system, the significance tests and the bar chart."""
    lines = [
        "## Controllable retrieval (test split)",
        "",
        "Recall@k in %, with the 95% Wilson interval of Recall@1. `entity`: entity-conditioned similarity; "
        "`entity+rerank`: its top 10 reordered by the fused reranker score; `holistic`: the same model "
        "without an entity (whole-image similarity); *chance*: the expected recall of a random ranking of "
        "the same galleries. Relevant = the two reports agree on the entity (mention status and attributes).",
        "",
        "| modality | level | queries | system | R@1 [95% CI] | R@3 | R@5 | NDCG@5 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for modality, levels in metrics["retrieval"].items():
        shown = {k: v for k, v in levels.items() if not (k == "all" and len(levels) == 2)}  # "all" = the one level
        for level, entry in shown.items():
            lines += _retrieval_rows(modality, level, entry)
    overall = metrics["retrieval"].get("all", {}).get("all", {})
    test = overall.get("mcnemar_recall@1", {}).get("entity vs holistic")
    if test:
        lines += ["", f"McNemar (Recall@1, entity vs holistic, all queries): p = {test['p_value']:.3g}."]
    clustered = overall.get("clustered_recall@1", {}).get("entity vs holistic")
    if clustered:
        lines += ["", _clustered_sentence("Recall@1, entity vs holistic, all queries", clustered)]
    return [*lines, "", "![Recall@k](figures/recall_bars.png)", ""]


def _retrieval_rows(modality: str, level: str, entry: dict) -> list[str]:
    """The table rows of one modality and level: chance (when known), then each system."""
    rows = []
    chance = entry.get("chance")
    if chance:
        rows.append(
            f"| {modality} | {level} | {entry['queries']} | *chance* | {percent(chance['recall@1'])} | "
            f"{percent(chance['recall@3'])} | {percent(chance['recall@5'])} | |"
        )
    for system in (s for s in SYSTEMS if s in entry):
        stats = entry[system]
        low, high = stats["recall@1_ci95"]
        rows.append(
            f"| {modality} | {level} | {entry['queries']} | {system} | {percent(stats['recall@1'])} "
            f"[{percent(low)}-{percent(high)}] | {percent(stats['recall@3'])} | "
            f"{percent(stats['recall@5'])} | {percent(stats['ndcg@5'])} |"
        )
    return rows


def _expert_lines(metrics: dict) -> list[str]:
    """How far stage 1 moved each modality family's expert."""
    experts = metrics.get("expert_changes")
    if not experts:
        return []
    lines = [
        "Each modality family has its own expert in the vision encoder's feed-forward layers; how far "
        "stage 1 moved each from its initial weights (relative distance; 0 would mean the family never trained):",
        "",
        "| expert (modality) | relative change | test queries |",
        "|---|---|---|",
    ]
    for modality, change in experts.items():
        queries = metrics["retrieval"].get(modality, {}).get("all", {}).get("queries", 0)
        lines.append(f"| {modality} | {change:.3f} | {queries} |")
    lines.append("")
    return lines


def _entity_retrieval_lines(metrics: dict) -> list[str]:
    """Recall@1 per entity and system."""
    by_entity = metrics.get("retrieval_by_entity")
    if not by_entity:
        return []
    systems = [s for s in SYSTEMS if s in next(iter(by_entity.values()))]
    lines = [
        "Recall@1 (%) per entity:",
        "",
        "| modality | level | entity | queries | " + " | ".join(systems) + " |",
        "|---|---|---|---|" + "---|" * len(systems),
    ]
    for entity, entry in by_entity.items():
        scores = " | ".join(percent(entry[s]) for s in systems)
        lines.append(f"| {entry['modality']} | {entry['level']} | {entity} | {entry['queries']} | {scores} |")
    lines.append("")
    return lines


def _montage_lines(metrics: dict) -> list[str]:
    """The example search and its montage figure."""
    montage = metrics.get("montage")
    if not montage:
        return []
    marks = ", ".join(
        f"#{h['rank']} {h['study_id']} ({'relevant' if h['relevant'] else 'not relevant'})" for h in montage["hits"]
    )
    return [
        f"Search for `{montage['query']}` under *{montage['entity']}*: {marks}. Heat-maps show the "
        "conditioner's attention over each image.",
        "",
        f"![montage]({montage['figure']})",
        "",
    ]


def _closed_vqa_lines(metrics: dict) -> list[str]:
    """Closed-ended accuracy of the VLM's scorings and the baselines, the tests, and the strata."""
    closed = metrics["vqa"]["closed"]
    baselines = closed.get("baselines") or {"text_only": closed["text_only"]}
    lines = [
        "## Comparative VQA (test split)",
        "",
        "| system | closed-ended accuracy % [95% CI] | questions |",
        "|---|---|---|",
    ]
    systems = [(_SCORINGS.get(name, name), entry) for name, entry in closed["by_scoring"].items()]
    if "blind_vlm" in closed:
        systems.append(("blind VLM (blank images; answer likelihood)", closed["blind_vlm"]))
    for label, entry in [*systems, *((_BASELINE_NAMES.get(name, name), entry) for name, entry in baselines.items())]:
        lines.append(
            f"| {label} | {percent(entry['accuracy'])} [{percent(entry['ci95'][0])}-{percent(entry['ci95'][1])}] "
            f"| {entry['questions']} |"
        )
    tests = [f"{name} p = {entry['mcnemar']['p_value']:.3g}" for name, entry in closed["by_scoring"].items()]
    lines += [
        "",
        f"McNemar (VLM vs text-only): {', '.join(tests)}. Option letter: the letter the model finds most "
        "likely to open its answer; answer likelihood: the option whose whole answer it finds most likely. "
        "The baselines are fitted on the training split's questions as they were before the language-prior "
        f"filter ({_filtered_splits(metrics)}). "
        f"Accuracy by question dimension and by entity uses the {closed['scoring']} scoring.",
        "",
    ]
    for name, entry in baselines.items():
        test = entry.get("clustered") or (closed.get("clustered") if name == "text_only" else None)
        if test:
            label = f"VLM ({closed['scoring']}) vs {_BASELINE_NAMES.get(name, name)}, clustered by patient"
            label += " (the first of the pair's two, sorted)"
            lines += [_clustered_sentence(label, test), ""]
    return lines + _closed_vqa_strata(closed)


def _closed_vqa_strata(closed: dict) -> list[str]:
    """The VLM's accuracy by question dimension and by entity, where measured."""
    lines = []
    for key, title in (("by_dimension", "question dimension"), ("by_entity", "entity")):
        if not closed.get(key):
            continue
        lines += [f"| {title} | VLM accuracy % | questions |", "|---|---|---|"]
        for name, entry in closed[key].items():
            lines.append(f"| {name} | {percent(entry['accuracy'])} | {entry['questions']} |")
        lines.append("")
    return lines


def _open_ended_lines(metrics: dict) -> list[str]:
    """Open-ended answer scores and a few example answers."""
    scores = metrics["vqa"]["open_ended"]
    lines = [
        "",
        f"Open-ended answers ({scores['questions']} questions): "
        + ", ".join(f"{name} {value:.3f}" for name, value in scores.items() if name != "questions")
        + ". BLEU is sacreBLEU's corpus BLEU-4"
        + (f" ({metrics['vqa']['bleu_signature']})" if metrics["vqa"].get("bleu_signature") else "")
        + ", ROUGE-L rouge-score's F1 (no stemming), METEOR nltk's without WordNet synonyms (exact and stem "
        "matches: WordNet is not available offline), all on a 0-1 scale. BERTScore uses the bundled MiniLM "
        "(no rescaling); entity F1 compares the clinical facts "
        "(entity, status, attributes) our report parser reads from answer and reference."
        + "".join(f" Not computed: {reason}." for reason in metrics["vqa"].get("unavailable_metrics", {}).values()),
        "",
        "| images | question | reference | model's answer |",
        "|---|---|---|---|",
    ]
    for example in metrics["vqa"].get("examples", [])[:6]:
        lines.append(
            f"| {example['study_a']} vs {example['study_b']} | {example['question']} | {example['reference']} | "
            f"{example['answer'] or '(empty)'} |"
        )
    return lines


def _longitudinal_lines(metrics: dict) -> list[str]:
    """Change-label accuracy, its baselines, its strata and the confusion matrix."""
    longitudinal = metrics["longitudinal"]
    lines = [
        "",
        "## Longitudinal follow-up (same patient, prior vs current)",
        "",
        f"Change-label accuracy: {percent(longitudinal['accuracy'])}% of {longitudinal['questions']} questions "
        f"(95% CI {percent(longitudinal['ci95'][0])}-{percent(longitudinal['ci95'][1])}).",
        "",
    ]
    for name, entry in longitudinal.get("baselines", {}).items():
        label = f"VLM vs {_BASELINE_NAMES.get(name, name)} ({percent(entry['accuracy'])}%"
        label += ", fitted on the training follow-up questions)"
        lines += [_clustered_sentence(label, entry["clustered"]) if "clustered" in entry else label + ".", ""]
    lines += [
        "| stratum | value | accuracy % | questions |",
        "|---|---|---|---|",
    ]
    for stratum in ("by_label", "by_attribute", "by_entity"):
        for value, entry in longitudinal[stratum].items():
            lines.append(f"| {stratum[3:]} | {value} | {percent(entry['accuracy'])} | {entry['questions']} |")
    return [*lines, "", "![confusion matrix](figures/confusion.png)", ""]


def _wall_time_and_model_lines(metrics: dict) -> list[str]:
    """Seconds per step, and where the trained models are."""
    lines = ["## Wall time (seconds)", "", "| step | seconds |", "|---|---|"]
    lines += [f"| {name} | {value:.1f} |" for name, value in metrics.get("wall_time_seconds", {}).items()]
    models = metrics.get("run", {}).get("models", {})
    if models:
        lines += ["", "Trained models (load with `AutoModel` / `AutoModelForImageTextToText.from_pretrained`):", ""]
        lines += [f"- {name}: `{path}`" for name, path in models.items()]
    return lines


def html_report(markdown: str, figures_root: str | Path | None = None) -> str:
    """A self-contained HTML page of the Markdown report, rendered by markdown-it-py (CommonMark with
    GitHub's tables; raw HTML in the text is escaped, not passed through). With `figures_root`, each
    image the report links to under it is embedded as a PNG data URI, so the page can be mailed or
    attached alone; images not found there keep their link."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(markdown)
    if figures_root is not None:
        root = Path(figures_root)
        for token in tokens:
            for child in token.children or []:
                source = child.attrGet("src") if child.type == "image" else None
                if source and not source.startswith(("data:", "http:", "https:")) and (root / source).is_file():
                    encoded = base64.b64encode((root / source).read_bytes()).decode("ascii")
                    child.attrSet("src", f"data:image/png;base64,{encoded}")
    body = parser.renderer.render(tokens, parser.options, {})
    full = f"<h2>{FULL_RESULTS}</h2>"
    if full in body:  # the full tables, collapsed below what the reader wants first
        first, rest = body.split(full, 1)
        body = f"{first}<details><summary><h2 style='display:inline'>{FULL_RESULTS}</h2></summary>{rest}</details>"
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}"
        "img{max-width:100%}code{background:#f6f6f6;padding:0 2px}"
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>MedReCo demo</title>"
        f"<style>{style}</style></head><body>{body}</body></html>\n"
    )


def write_report(metrics: dict, out: str | Path) -> dict[str, Path]:
    """Figures, `metrics.json`, `report.md` and `report.html` under `out`."""
    out = Path(out)
    figures = out / "figures"
    recall_bars(metrics["retrieval"], figures / "recall_bars.png")
    confusion_plot(metrics["longitudinal"]["confusion"], figures / "confusion.png")
    answerability_plot(metrics, figures / "answerability.png")
    headline_plot(headlines(metrics), figures / "headline.png")
    markdown = markdown_report(metrics)
    paths = {"metrics": out / "metrics.json", "markdown": out / "report.md", "html": out / "report.html"}
    write_text_atomically(paths["metrics"], json.dumps(metrics, indent=1, default=str))
    write_text_atomically(paths["markdown"], markdown)
    write_text_atomically(paths["html"], html_report(markdown, figures_root=out))
    return paths


__all__ = ["confusion_plot", "html_report", "markdown_report", "recall_bars", "write_report"]
