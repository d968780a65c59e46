"""What the demo report leads with: each headline comparison (retrieval, comparative VQA, swap
consistency, follow-up) against its baseline, with its patient-clustered interval, as one figure
and one short table. The full tables follow it in the report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..atomic import save_figure
from .report_comparison import percent


@dataclass(frozen=True)
class Headline:
    """medreco against a baseline on one measure; `test` is the patient-clustered comparison
    (`difference`, `interval`, `p_value`, `clusters`)."""

    measure: str
    count: str
    ours: float
    baseline_name: str
    baseline: float
    test: dict


def _retrieval(metrics: dict) -> Headline:
    entry = metrics["retrieval"]["all"]["all"]
    test = entry["clustered_recall@1"]["entity vs holistic"]
    return Headline(
        "retrieval Recall@1: entity-conditioned", f"{entry['queries']} queries",
        entry["entity"]["recall@1"], "holistic (same model)", entry["holistic"]["recall@1"], test,
    )  # fmt: skip


def _answerability(group: str, baseline: str, label: str) -> Callable[[dict], Headline]:
    """The VLM against `baseline` on the image-answerable (or report-only) questions."""

    def headline(metrics: dict) -> Headline:
        entry = metrics["vqa"]["closed"][group]
        test = entry["comparisons"][baseline]["clustered"]
        return Headline(
            f"closed VQA, {group.replace('_', '-')}: VLM", f"{entry['questions']} questions",
            entry["vlm"]["accuracy"], label, entry[baseline]["accuracy"], test,
        )  # fmt: skip

    return headline


def _all_closed(metrics: dict) -> Headline:
    closed = metrics["vqa"]["closed"]
    text_only = (closed.get("baselines") or {}).get("text_only") or closed["text_only"]
    test = text_only.get("clustered") or closed["clustered"]
    ours = closed["by_scoring"][closed["scoring"]]
    return Headline(
        "closed VQA, all questions: VLM", f"{ours['questions']} questions",
        ours["accuracy"], "text-only", text_only["accuracy"], test,
    )  # fmt: skip


def _swap(metrics: dict) -> Headline:
    swap = metrics["vqa"]["swap_consistency"]
    vlm, blind = swap["vlm"]["order_dependent"], swap["blind_vlm"]["order_dependent"]
    return Headline(
        "swap consistency: VLM", f"{vlm['questions']} questions",
        vlm["rate"], "blind VLM", blind["rate"], swap["vlm_minus_blind_vlm"]["clustered"],
    )  # fmt: skip


def _follow_up(metrics: dict) -> Headline:
    longitudinal = metrics["longitudinal"]
    text_only = longitudinal["baselines"]["text_only"]
    return Headline(
        "follow-up change label: VLM", f"{longitudinal['questions']} questions",
        longitudinal["accuracy"], "text-only", text_only["accuracy"], text_only["clustered"],
    )  # fmt: skip


SOURCES = (
    _retrieval,
    _answerability("image_answerable", "blind_vlm", "blind VLM (blank images)"),
    _answerability("image_answerable", "text_only", "text-only"),
    _answerability("report_only", "text_only", "text-only"),
    _all_closed,
    _swap,
    _follow_up,
)


def headlines(metrics: dict) -> list[Headline]:
    """Every headline comparison the run measured (a quick run or an old metrics.json lacks some)."""
    found = []
    for source in SOURCES:
        try:
            found.append(source(metrics))
        except (KeyError, TypeError):
            continue
    return found


def headline_plot(items: list[Headline], path: Path) -> Path | None:
    """Each comparison's difference in points with its clustered 95% interval, zero marked."""
    if not items:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8.5, 0.55 * len(items) + 1.2))
    rows = list(range(len(items)))[::-1]
    for row, item in zip(rows, items):
        low, high = (100 * bound for bound in item.test["interval"])
        difference = 100 * item.test["difference"]
        colour = "#1f6fb4" if low > 0 else ("#b4481f" if high < 0 else "#777777")
        axis.plot([low, high], [row, row], color=colour, linewidth=2.5)
        axis.plot([difference], [row], "o", color=colour)
        axis.annotate(
            f"{percent(item.ours)} vs {percent(item.baseline)}",
            (high, row),
            xytext=(6, -3),
            textcoords="offset points",
            fontsize=8,
        )
    axis.axvline(0, color="black", linewidth=0.8)
    axis.set_yticks(rows, [f"{item.measure} - {item.baseline_name}" for item in items], fontsize=8)
    axis.set_xlabel("difference, points (patient-clustered 95% interval)")
    axis.margins(x=0.35)
    return save_figure(figure, path)


def headline_lines(metrics: dict) -> list[str]:
    """The report's first section: the figure and the table of the headline comparisons."""
    items = headlines(metrics)
    if not items:
        return []
    lines = [
        "## What the run shows",
        "",
        "Each comparison on the held-out test patients, medreco against its baseline; the difference in points "
        "with its patient-clustered 95% interval (cluster bootstrap) and sign-flip p. Blue: the interval is "
        "above zero; red: below; grey: it holds zero.",
        "",
        "![headline comparisons](figures/headline.png)",
        "",
        "| measure | n | medreco % | baseline | baseline % | difference [95% interval] | p |",
        "|---|---|---|---|---|---|---|",
    ]
    for item in items:
        low, high = item.test["interval"]
        lines.append(
            f"| {item.measure} | {item.count} | {percent(item.ours)} | {item.baseline_name} | {percent(item.baseline)} "
            f"| {100 * item.test['difference']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] "
            f"| {item.test['p_value']:.2g} |"
        )
    return [*lines, ""]


__all__ = ["Headline", "headline_lines", "headline_plot", "headlines"]
