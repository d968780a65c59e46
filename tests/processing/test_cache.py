import threading
import time

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
    assert torch.equal(cached, fresh)  # a cold cache gives what a warm one will: float16 values
    uncached = MedReCoImageProcessor(recipes=recipes).preprocess_one(tmp_path / "s", "chest_ct")
    torch.testing.assert_close(cached, uncached, atol=1e-3, rtol=0)
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


def test_digests_are_remembered_until_a_file_changes(tmp_path, monkeypatch):
    import os

    from medreco.processing import cache

    write_series(tmp_path / "s", box_phantom())
    single = tmp_path / "a.bin"
    single.write_bytes(b"first")
    hashed = []
    real = cache.content_digest
    monkeypatch.setattr(cache, "content_digest", lambda path, settings: hashed.append(path) or real(path, settings))
    memo = cache.DigestMemo()
    for _ in range(3):
        assert memo(tmp_path / "s", {"x": 1}) == real(tmp_path / "s", {"x": 1})
        assert memo(single, {}) == real(single, {})
    assert len(hashed) == 2  # once per input, not once per call
    single.write_bytes(b"second")
    os.utime(single, ns=(time.time_ns(), time.time_ns() + 10**9))  # a later modification time
    assert memo(single, {}) == real(single, {}) != real(tmp_path / "s", {})
    assert len(hashed) == 3
    assert memo(single, {"x": 2}) == real(single, {"x": 2})  # other settings, another key


def test_damaged_entry_is_a_miss_and_gets_rewritten(tmp_path):
    cache = TensorCache(tmp_path)
    path = cache.put("ab" * 20, torch.ones(1, 2, 2, 2))
    path.write_bytes(path.read_bytes()[:20])
    assert cache.get("ab" * 20) is None
    cache.put("ab" * 20, torch.ones(1, 2, 2, 2))
    assert cache.get("ab" * 20).sum() == 8


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    """Two writers replace one entry over and over while a reader polls it: the reader only ever
    sees a complete tensor from one write (rename is atomic), and no temporary file survives."""
    cache, key = TensorCache(tmp_path), "cd" * 20
    errors: list[BaseException] = []

    def write(value: float) -> None:
        try:
            for _ in range(25):
                cache.put(key, torch.full((1, 16, 64, 64), value))
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    writers = [threading.Thread(target=write, args=(v,)) for v in (1.0, 2.0)]
    for thread in writers:
        thread.start()
    deadline, seen = time.monotonic() + 60, set()
    while any(t.is_alive() for t in writers) and time.monotonic() < deadline:
        tensor = cache.get(key)
        if tensor is not None:
            values = torch.unique(tensor).tolist()
            assert len(values) == 1, "a reader saw a mix of two writes"
            seen.add(values[0])
    for thread in writers:
        thread.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in writers)
    assert seen and seen <= {1.0, 2.0}
    assert not list(tmp_path.rglob("*.tmp"))
