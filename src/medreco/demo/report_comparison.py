"""The demo report's account of whether the VLM reads the images: closed accuracy of the VLM, the
blind VLM (blank images) and the baselines on the questions the images can answer and on those only
the reports answer, per family and dimension; swap consistency; the linear-probe ceiling of the
frozen stage-1 features; and the bar chart of the first."""

from __future__ import annotations

from pathlib import Path

from ..atomic import save_figure

SYSTEM_NAMES = {
    "vlm": "VLM",
    "blind_vlm": "blind VLM (blank images)",
    "text_only": "text-only",
    "majority": "majority answer",
}
GROUP_NAMES = {"image_answerable": "image-answerable", "report_only": "report-only", "unknown": "unknown"}


MODALITY_NAMES = {
    "chest_xray": "chest X-ray",
    "chest_ct": "chest CT",
    "abdominal_ct": "abdominal CT",
    "brain_mri": "brain MRI",
    "ultrasound": "ultrasound",
}


def percent(value: float) -> str:
    """A share as the report writes it: 0.4771 -> '47.7'."""
    return f"{100 * value:.1f}"


def _difference(test: dict) -> str:
    low, high = test["interval"]
    return f"{100 * test['difference']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}], p = {test['p_value']:.3g}"


def _groups(closed: dict) -> list[str]:
    return [group for group in GROUP_NAMES if group in closed]


def answerability_lines(metrics: dict) -> list[str]:
    """Accuracy per system on image-answerable and report-only questions, the VLM's clustered
    differences, and the image-answerable questions per family."""
    closed = metrics["vqa"]["closed"]
    known = closed.get("answerability", {})
    if not known.get("available"):
        reason = known.get("reason", "the mined folder records nothing about what its images show")
        return ["## Do the images answer?", "", f"Not measured: {reason}.", ""]
    groups = _groups(closed)
    systems = [s for s in SYSTEM_NAMES if s in closed[groups[0]]]
    lines = [
        "## Do the images answer? (image-answerable vs report-only questions)",
        "",
        "The synthetic cohort records what its images show (`answerability.json`): a question about a "
        "finding's presence, location, size or number is image-answerable; one about what only the report "
        "states (morphology, aetiology, a finding the phantom does not draw) is report-only. The blind VLM is "
        "the same stage 2 trained and scored on blank images.",
        "",
        "| questions | n | " + " | ".join(SYSTEM_NAMES[s] + " %" for s in systems) + " |",
        "|---|---|" + "---|" * len(systems),
    ]
    for group in groups:
        entry = closed[group]
        cells = " | ".join(percent(entry[s]["accuracy"]) for s in systems)
        lines.append(f"| {GROUP_NAMES[group]} | {entry['questions']} | {cells} |")
    lines += ["", "![closed accuracy by answerability](figures/answerability.png)", ""]
    for group in groups:
        comparisons = closed[group].get("comparisons", {})
        tests = [
            f"VLM - {SYSTEM_NAMES.get(name, name)} {_difference(test['clustered'])}"
            for name, test in comparisons.items()
            if "clustered" in test
        ]
        if tests:
            lines += [
                f"{GROUP_NAMES[group].capitalize()}, patient-clustered (points, 95% interval): "
                + "; ".join(tests)
                + ".",
                "",
            ]
    return lines + _family_lines(closed, systems) + swap_lines(metrics)


def _family_lines(closed: dict, systems: list[str]) -> list[str]:
    """Image-answerable accuracy per family, and per dimension."""
    entry = closed.get("image_answerable")
    if not entry:
        return []
    lines = []
    for key, title in (("by_family", "family"), ("by_dimension", "dimension")):
        lines += [
            f"| image-answerable, by {title} | n | " + " | ".join(SYSTEM_NAMES[s] + " %" for s in systems) + " |",
            "|---|---|" + "---|" * len(systems),
        ]
        for name, scores in entry.get(key, {}).items():
            n = next(iter(scores.values()))["questions"]
            cells = " | ".join(percent(scores[s]["accuracy"]) if s in scores else "-" for s in systems)
            lines.append(f"| {name} | {n} | {cells} |")
        lines.append("")
    return lines


def swap_lines(metrics: dict) -> list[str]:
    """Swap consistency of the VLM and the blind VLM."""
    swap = metrics["vqa"].get("swap_consistency")
    if not swap:
        return []
    cells = []
    for name in ("vlm", "blind_vlm"):
        if name in swap:
            entry = swap[name]
            cells.append(
                f"{SYSTEM_NAMES[name]} {percent(entry['order_dependent']['rate'])}% "
                f"(both orders right {percent(entry['both_orders_correct']['rate'])}%)"
            )
    comparison = swap.get("vlm_minus_blind_vlm", {})
    difference = (
        f" Difference, patient-clustered: {_difference(comparison['clustered'])}."
        if comparison.get("clustered")
        else ""
    )
    questions = swap.get("vlm", {}).get("order_dependent", {}).get("questions", 0)
    return [
        f"**Swap consistency** (the same question with the two images exchanged; on the {questions} questions "
        "whose answer depends on the order, the share where the model's answer changes to its inverse, "
        '"Case A only" <-> "Case B only", larger <-> smaller): ' + ", ".join(cells) + "." + difference,
        "",
    ]


def probe_lines(metrics: dict) -> list[str]:
    """The linear probe of the frozen stage-1 features per entity, and the presence ceiling it implies."""
    probe = metrics.get("probe")
    if not probe:
        return []
    lines = [
        "## Ceiling: what the frozen stage-1 features show",
        "",
        "A logistic regression on the stage-1 entity-conditioned feature of each image, fitted on the training "
        "split's report statuses and scored on the test split. The presence ceiling combines the text-only "
        "prior with the probe's likelihoods of both images: the accuracy a stage 2 that read the frozen features "
        "as well as a linear probe would reach on presence questions.",
        "",
    ]
    ceiling = metrics.get("presence_ceiling")
    if ceiling and ceiling.get("questions"):
        low, high = ceiling["ci95"]
        lines += [
            f"Presence ceiling: {percent(ceiling['accuracy'])}% [{percent(low)}-{percent(high)}] on "
            f"{ceiling['questions']} presence questions (text-only on the same questions: "
            f"{percent(ceiling['text_only']['accuracy'])}%; the probe alone, without the prior: "
            f"{percent(ceiling['probe_only']['accuracy'])}%).",
            "",
        ]
        swap = ceiling.get("swap_consistency")
        if swap and swap["order_dependent"]["questions"]:
            lines += [
                f"The same choice with the two images exchanged changes to its inverse on "
                f"{percent(swap['order_dependent']['rate'])}% of the {swap['order_dependent']['questions']} presence "
                "questions whose answer depends on the order: the swap consistency the frozen features allow.",
                "",
            ]
    lines += ["| entity | train | test | AUC | balanced accuracy % |", "|---|---|---|---|---|"]
    for row in probe.get("table", []):
        lines.append(
            f"| {row['entity']} | {row['n_train']} | {row['n_test']} | {row['auc']:.2f} | "
            f"{percent(row['balanced_accuracy'])} |"
        )
    return [*lines, ""]


def answerability_plot(metrics: dict, path: Path) -> Path | None:
    """Closed accuracy per system, image-answerable vs report-only, with 95% intervals."""
    closed = metrics["vqa"]["closed"]
    if not closed.get("answerability", {}).get("available"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(closed)
    systems = [s for s in SYSTEM_NAMES if s in closed[groups[0]]]
    figure, axis = plt.subplots(figsize=(1.6 + 1.5 * len(groups) * len(systems) / 2, 3.4))
    width = 0.8 / len(systems)
    for offset, system in enumerate(systems):
        values = [closed[g][system]["accuracy"] for g in groups]
        low = [max(0.0, v - closed[g][system]["ci95"][0]) for v, g in zip(values, groups)]
        high = [max(0.0, closed[g][system]["ci95"][1] - v) for v, g in zip(values, groups)]
        positions = [i + (offset - (len(systems) - 1) / 2) * width for i in range(len(groups))]
        axis.bar(positions, values, width, yerr=[low, high], capsize=2, label=SYSTEM_NAMES[system])
    axis.set_xticks(range(len(groups)), [f"{GROUP_NAMES[g]} (n={closed[g]['questions']})" for g in groups])
    axis.set_ylim(0, 1)
    axis.set_ylabel("closed accuracy (95% Wilson CI)")
    axis.legend(fontsize=8)
    return save_figure(figure, path)


__all__ = ["answerability_lines", "answerability_plot", "percent", "probe_lines", "swap_lines"]
