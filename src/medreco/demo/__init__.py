"""The main job, `medreco demo`: synthetic cohort -> mining -> stage 1, reranker, stage 2 ->
evaluation -> `metrics.json`, `report.md`, `report.html`, figures and saved models."""

from .pipeline import DemoConfig, evaluate_demo, run_demo
from .report import write_report

__all__ = ["DemoConfig", "evaluate_demo", "run_demo", "write_report"]
