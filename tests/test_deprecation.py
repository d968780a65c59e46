"""Modules that moved in the layout step: their old paths still import for one release, with a
FutureWarning naming the new path, and give the very same objects."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

OLD_TO_NEW = {
    "medreco.modeling.modeling_medreco": ("medreco.modeling.modeling_retrieval", "MedReCoModel"),
    "medreco.modeling.configuration_medreco": ("medreco.modeling.configuration_reranker", "MedReCoRerankerConfig"),
    "medreco.processing.processor": ("medreco.processing.processing_medreco", "MedReCoProcessor"),
    "medreco.processing.image_processor": ("medreco.processing.image_processing_medreco", "MedReCoImageProcessor"),
    "medreco.retrieval": ("medreco.inference", "Searcher"),
    "medreco.retrieval.encoder": ("medreco.inference.encoder", "RetrievalEncoder"),
    "medreco.retrieval.index": ("medreco.inference.index", "GalleryIndex"),
    "medreco.retrieval.search": ("medreco.inference.search", "plot_montage"),
    "medreco.comparison": ("medreco.inference.comparison", "ComparativeReader"),
    "medreco.data.decomposition": ("medreco.data.reports.decomposition", "RuleBasedDecomposer"),
    "medreco.data.llm": ("medreco.data.reports.llm", "LLMDecomposer"),
    "medreco.data.longitudinal": ("medreco.data.mining.longitudinal", "consistent_change_label"),
    "medreco.data.ontology": ("medreco.data.reports.ontology", "Ontology"),
    "medreco.data.attributes": ("medreco.data.reports.attributes", "read_attributes"),
    "medreco.data.similarity": ("medreco.data.mining.similarity", "statement_key"),
    "medreco.data.supervision": ("medreco.data.mining.supervision", "build_triplets"),
    "medreco.data.vqa": ("medreco.data.mining.vqa", "closed_prompt"),
    "medreco.data.splits": ("medreco.data.mining.splits", "assign_splits"),
    "medreco.data.mining_benchmark": ("medreco.data.mining.benchmark", "score_decomposition"),
}
MOVED_NAMES = {
    ("medreco.training.data", "MinedData"): "medreco.data.mining",
    ("medreco.training.stage2", "LETTERS"): "medreco.data.mining.vqa",
    ("medreco.training.data", "MINED_TABLES"): "medreco.data.mining",
    ("medreco.data.llm", "llm_vqa"): "medreco.data.mining.vqa",
    ("medreco.data.llm", "needs_two_images"): "medreco.data.mining.vqa",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_module_path_warns_and_gives_the_same_objects(old):
    new, name = OLD_TO_NEW[old]
    for module in [m for m in sys.modules if m == old or m.startswith(f"{old}.")]:
        del sys.modules[module]  # import afresh, so that the warning is raised again
    with pytest.warns(FutureWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize(("old", "name"), sorted(MOVED_NAMES))
def test_a_name_that_left_its_module_is_still_served_with_a_warning(old, name):
    module = importlib.import_module(old)
    with pytest.warns(FutureWarning, match=MOVED_NAMES[(old, name)].replace(".", r"\.")):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(MOVED_NAMES[(old, name)]), name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_the_package_and_the_new_paths_import_without_a_warning():
    """In a fresh process, nothing medreco itself imports is an old path."""
    modules = ["medreco.cli", "medreco.demo", *sorted({new for new, _ in OLD_TO_NEW.values()})]
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    result = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
