import multiprocessing
import os

import numpy as np
import torch

from io_helpers import box_phantom, write_series
from medreco.processing import MedReCoImageProcessor, TensorCache, content_digest


def test_cache_hit_equals_fresh_result_and_depends_on_settings(tmp_path):
    write_series(tmp_path / "s", box_phantom())
    recipes = {"chest_ct": {"size": [20, 32, 32], "spacing": [2.0, 1.5, 1.5]}}
    processor = MedReCoImageProcessor(recipes=recipes, tensor_cache_dir=str(tmp_path / "cache"))
    fresh = processor.preprocess_one(tmp_path / "s", "chest_ct")
    entries = list((tmp_path / "cache").rglob("*.safetensors"))
    assert len(entries) == 1
    cached = processor.preprocess_one(tmp_path / "s", "chest_ct")
    torch.testing.assert_close(cached, fresh, atol=1e-3, rtol=0)  # float16 storage
    other = MedReCoImageProcessor(
        recipes={"chest_ct": {**recipes["chest_ct"], "window": [-500, 500]}}, tensor_cache_dir=str(tmp_path / "cache")
    )
    other.preprocess_one(tmp_path / "s", "chest_ct")
    assert len(list((tmp_path / "cache").rglob("*.safetensors"))) == 2


def test_key_follows_content_not_name(tmp_path):
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"same")
    b.write_bytes(b"same")
    assert content_digest(a, {}) == content_digest(b, {})
    b.write_bytes(b"different")
    assert content_digest(a, {}) != content_digest(b, {})
    assert content_digest(a, {"x": 1}) != content_digest(a, {"x": 2})


def test_damaged_entry_is_a_miss_and_gets_rewritten(tmp_path):
    cache = TensorCache(tmp_path)
    path = cache.put("ab" * 20, torch.ones(1, 2, 2, 2))
    path.write_bytes(path.read_bytes()[:20])
    assert cache.get("ab" * 20) is None
    cache.put("ab" * 20, torch.ones(1, 2, 2, 2))
    assert cache.get("ab" * 20).sum() == 8


def _writer(directory: str, value: float, rounds: int) -> None:
    cache = TensorCache(directory)
    for _ in range(rounds):
        cache.put("cd" * 20, torch.full((1, 16, 64, 64), value))


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    writers = [context.Process(target=_writer, args=(str(tmp_path), v, 15)) for v in (1.0, 2.0)]
    for process in writers:
        process.start()
    cache, seen = TensorCache(tmp_path), set()
    while any(p.is_alive() for p in writers):
        tensor = cache.get("cd" * 20)
        if tensor is not None:
            values = torch.unique(tensor).tolist()
            assert len(values) == 1, "a reader saw a mix of two writes"
            seen.add(values[0])
    for process in writers:
        process.join()
        assert process.exitcode == 0
    assert cache.get("cd" * 20) is not None and seen <= {1.0, 2.0}
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temporary file left behind
    assert os.listdir(tmp_path)
    assert np.isfinite(cache.get("cd" * 20).numpy()).all()
