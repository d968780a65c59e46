"""The main job, `medreco demo`: synthetic cohort -> mining -> stage 1, reranker, stage 2 ->
evaluation -> `metrics.json`, `report.md`, `report.html`, figures and saved models; and
`medreco ablate`, the ablation grid at the demo's scale."""

from .ablation import ABLATIONS, AblationConfig, run_ablations
from .pipeline import DemoConfig, evaluate_demo, run_demo
from .report import write_report

__all__ = ["ABLATIONS", "AblationConfig", "DemoConfig", "evaluate_demo", "run_ablations", "run_demo", "write_report"]
