"""On-disk cache of preprocessed tensors, keyed by the input's bytes and the preprocessing settings.

Entries are safetensors files holding only `pixel_values` and non-identifying metadata. Writes go
to a unique temporary file renamed into place, so concurrent readers see a whole entry or none,
and a crash never leaves a corrupt entry behind. A damaged entry is treated as a miss."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..atomic import atomic_path
from .readers import volume_file_image

logger = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = "2"  # 2: MONOCHROME1 windowing fixed, so tensors of such images changed
_CHUNK = 1 << 20


def content_digest(path: str | Path, settings: dict) -> str:
    """A hash of a file's (or a folder's files') bytes plus the settings that shape the output."""
    path = Path(path)
    digest = hashlib.blake2b(digest_size=20)
    digest.update(json.dumps({"format": CACHE_FORMAT_VERSION, **settings}, sort_keys=True).encode())
    for file in _files(path):
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as handle:
            while block := handle.read(_CHUNK):
                digest.update(block)
    return digest.hexdigest()


def _files(path: Path) -> list[Path]:
    """The file itself (with the volume a `.volume.json` file names), or a folder's files (hidden
    ones left out) in a stable order."""
    if not path.is_dir():
        named = volume_file_image(path)
        return [path, named] if named is not None and named.is_file() else [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


def _signature(file: Path) -> tuple[int, int]:
    status = file.stat()
    return status.st_size, status.st_mtime_ns


class DigestMemo:
    """`content_digest` remembered by the files' (path, size, modification time): a training loop
    that reads the same files every epoch hashes each once. A file rewritten in place gets a new
    modification time, so its digest is computed again."""

    def __init__(self):
        self._digests: dict[tuple, str] = {}

    def __call__(self, path: str | Path, settings: dict) -> str:
        path = Path(path)
        stats = tuple((str(f), *_signature(f)) for f in _files(path))
        key = (str(path), json.dumps(settings, sort_keys=True), stats)
        if key not in self._digests:
            self._digests[key] = content_digest(path, settings)
        return self._digests[key]


class TensorCache:
    """`get`/`put` preprocessed tensors under a directory (created on first write)."""

    def __init__(self, directory: str | Path, dtype: torch.dtype = torch.float16):
        self.directory = Path(directory)
        self.dtype = dtype

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.safetensors"

    def get(self, key: str) -> torch.Tensor | None:
        path = self._path(key)
        if not path.exists():
            return None
        try:
            return load_file(path)["pixel_values"].float()
        except (SafetensorError, KeyError, OSError, ValueError) as error:
            logger.warning("ignoring a damaged cache entry %s (%s)", path.name, type(error).__name__)
            return None

    def put(self, key: str, pixel_values: torch.Tensor) -> Path:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as temporary:
            save_file(
                {"pixel_values": pixel_values.to(self.dtype).contiguous()},
                temporary,
                metadata={"medreco_cache_format": CACHE_FORMAT_VERSION},
            )
        return path


__all__ = ["CACHE_FORMAT_VERSION", "DigestMemo", "TensorCache", "content_digest"]
