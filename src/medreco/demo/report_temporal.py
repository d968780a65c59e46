"""The demo report's temporal table: TILA's four protocols (standard, reversed, combined,
consistency) for the progression models (prior-fused, the same without the prior, with TILA's
fine-tuning) and for the comparative VLM and the blind VLM on their swapped questions."""

from __future__ import annotations

from ..evaluation import PROTOCOLS
from .report_comparison import SYSTEM_NAMES, percent

PROGRESSION_SYSTEMS = (
    ("prior_vs_static", "model", "progression model (prior fused, BioViL-T)"),
    ("prior_vs_static", "baseline", "the same without the prior (missing-prior token)"),
    ("tila_vs_plain", "model", "prior fused + TILA's BiCE and TCL"),
    ("prior_vs_static", "majority", "majority class of the training pairs"),
)


def _cell(entry: dict) -> str:
    low, high = entry["interval"]
    return f"{percent(entry['value'])} [{percent(low)}, {percent(high)}]"


def _difference(entry: dict) -> str:
    low, high = entry["interval"]
    return f"{100 * entry['value']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}], p = {entry['p_value']:.3f}"


def _share(entry: dict) -> str:
    low, high = entry["ci95"]
    return f"{percent(entry['rate'])} [{percent(low)}, {percent(high)}]"


def temporal_lines(metrics: dict) -> list[str]:
    """The progression table with its clustered differences, then the VLM's protocols."""
    temporal = metrics.get("temporal")
    if not temporal:
        return []
    reference = temporal["prior_vs_static"]["all"]["model"]
    lines = [
        "",
        "## Time: the prior image and the order of the pair",
        "",
        f"Interval change of each finding (improving / stable / worsening) on {reference['pairs']} test pairs of "
        f"{reference['patients']} patients: class-balanced macro-accuracy % with patient-clustered 95% "
        "intervals under TILA's four protocols (reversed: the pair read backwards against the inverse "
        "label; combined: inversion-aware scoring; consistency: right in both orders).",
        "",
        "| system | " + " | ".join(PROTOCOLS) + " |",
        "|---|" + "---|" * len(PROTOCOLS),
    ]
    for comparison, system, name in PROGRESSION_SYSTEMS:
        entry = temporal[comparison]["all"][system]
        lines.append(f"| {name} | " + " | ".join(_cell(entry[p]) for p in PROTOCOLS) + " |")
    probe = temporal.get("change_probe")
    if probe:
        for reading, name in (
            ("pair", "change probe: frozen stage-1 features of the pair"),
            ("current_only", "change probe: the current study alone"),
        ):
            lines.append(f"| *{name}* | " + " | ".join(_cell(probe[reading][p]) for p in PROTOCOLS) + " |")
    lines.append("")
    if probe:
        lines += [
            "The change probe is a one-vs-rest logistic regression on each pair's entity-conditioned stage-1 "
            "features (current - prior, current), fitted on the training pairs: what the frozen features "
            "show of the change before any head is trained.",
            "",
        ]
    for comparison, label in (
        ("prior_vs_static", "Prior fused minus without the prior"),
        ("tila_vs_plain", "TILA's fine-tuning minus the plain prior-fused model"),
    ):
        differences = temporal[comparison]["all"]["model_minus_baseline"]
        lines += [f"{label}: " + "; ".join(f"{p} {_difference(differences[p])}" for p in PROTOCOLS) + ".", ""]
    swap = metrics.get("vqa", {}).get("swap_consistency", {})
    rows = [(name, swap[name]["protocols"]) for name in ("vlm", "blind_vlm") if "protocols" in swap.get(name, {})]
    if rows:
        lines += [
            "The comparative VLM under the same protocols, on its closed questions that have a swapped twin "
            "(accuracy %, Wilson 95% intervals; not class-balanced, the options differ between questions):",
            "",
            "| system | " + " | ".join(PROTOCOLS) + " |",
            "|---|" + "---|" * len(PROTOCOLS),
        ]
        for name, protocols in rows:
            cells = [_share(protocols[p]) if p in protocols else "-" for p in PROTOCOLS]
            lines.append(f"| {SYSTEM_NAMES[name]} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


__all__ = ["temporal_lines"]
