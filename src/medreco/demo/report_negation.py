"""The demo report's negation and trend tables: CLIP-clinic's CXR-Align tasks built from the test reports
(does the stage-1 image feature prefer a study's report to the same report with one finding denied, or
omitted?) and TAMM's protocols (temporal sentence similarity; the trend classifier when stage 1 has one)."""

from __future__ import annotations

from .report_comparison import MODALITY_NAMES, percent

TASK_NAMES = {
    "negated": "report vs one finding denied",
    "omitted": "report vs one finding omitted",
    "statement": "the finding's sentence vs its denial (feature conditioned on the finding)",
}


def negation_lines(metrics: dict) -> list[str]:
    """Both tasks' accuracies with patient-clustered intervals, per modality, and the text-only cosine."""
    negation = metrics.get("negation")
    if not negation:
        return []
    cosine = negation["text_cosine"]
    lines = [
        "",
        "## Negation: does the image feature read a denied finding?",
        "",
        f"{negation['cases']} abnormal test studies of {negation['patients']} patients; each study's whole-image "
        "stage-1 feature against its report and a variant about one of its findings (the denial worded as "
        "the training reports word it). Accuracy % (chance 50) with patient-clustered 95% intervals:",
        "",
        "| task | all | " + " | ".join(MODALITY_NAMES.get(m, m) for m in negation.get("by_modality", {})) + " |",
        "|---|---|" + "---|" * len(negation.get("by_modality", {})),
    ]
    for task, name in TASK_NAMES.items():
        if task not in negation:
            continue
        low, high = negation[task]["interval"]
        cells = [f"{percent(negation[task]['accuracy'])} [{percent(low)}, {percent(high)}]"]
        cells += [percent(entry[task]) if task in entry else "-" for entry in negation.get("by_modality", {}).values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Text alone: the report and its negated variant lie at cosine {cosine['shared']:.3f} in the shared space "
        f"({cosine['backbone']:.3f} in the frozen text backbone's), the difference the image side must read.",
        "",
    ]
    return lines


def trend_lines(metrics: dict) -> list[str]:
    """Temporal sentence similarity in the text space and the backbone, and the trend classifier."""
    trends = metrics.get("trends")
    if not trends:
        return []
    lines = ["", "## Trends: improving, stable or worsening across adjacent studies", ""]
    similarity = trends["sentence_similarity"]
    if "unavailable" in similarity:
        lines += [f"Temporal sentence similarity: not scored ({similarity['unavailable']}).", ""]
    else:
        lines += [
            f"Temporal sentence similarity (TAMM's zero-shot task) on {similarity['pairs']} test pairs of change "
            "sentences about one finding, half paraphrases (the same direction), half contradictions: "
            f"class-balanced accuracy {percent(similarity['shared']['accuracy'])}% in the shared text space, "
            f"{percent(similarity['backbone']['accuracy'])}% in the frozen text backbone (chance 50).",
            "",
        ]
    classifier = trends["classifier"]
    if "unavailable" in classifier:
        lines += [f"Trend classifier: not scored ({classifier['unavailable']}).", ""]
        return lines
    scored = classifier["all"]
    lines += [
        f"Trend classifier on {scored['model']['pairs']} test pairs: "
        + "; ".join(
            f"{p} {percent(scored['model'][p]['value'])} (majority {percent(scored['majority'][p]['value'])})"
            for p in ("standard", "reversed", "combined", "consistency")
        )
        + " (class-balanced %).",
        "",
    ]
    return lines


__all__ = ["negation_lines", "trend_lines"]
