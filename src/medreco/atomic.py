"""Atomic file writes: write beside the target, then rename into place.

A reader (or a crash) never sees half a file, and a failed write leaves the previous version and
no temporary file behind. Cache entries, index files, manifests, images the package writes, model
cards and reports all go through here. Whole folders (training checkpoints, mined datasets) are
swapped in by renaming a folder instead (`training.loop`, `training.checkpoint`, `data.mining`)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path` to write to; on success it replaces `path`.

    The temporary name is unique per process and thread, so concurrent writers of the same file
    never share one; the last rename wins and every reader sees a whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the real name stays at the end: writers such as nibabel pick the format from the extension
    temporary = path.with_name(f".tmp.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.{path.name}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> Path:
    """`Path.write_text`, atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text)
    return Path(path)


__all__ = ["atomic_path", "write_text_atomically"]
