"""Commit points: every artefact the package writes becomes visible whole, or not at all.

A file is written beside its target, flushed to disk (`fsync`) and renamed into place
(`atomic_path`); a folder (model, checkpoint, mined table) is written beside its target, flushed,
and swapped in with one atomic exchange (`atomic_folder`). A crash or `kill -9` at any moment
leaves the previous version intact, and what the killed writer left aside is removed by the next
writer (`remove_stale_temporaries`). Artefacts made of several files have one commit point written
last: the gallery index's `index.json`, a mined folder's `summary.json`, a run's `latest` pointer.

`fault_point` marks every commit step. It does nothing unless the test-only environment variables
`MEDRECO_FAULT_LOG` (a file each step's label is appended to) and `MEDRECO_KILL_AT_STEP` (kill
this process with SIGKILL just before that step, counted from 1 over the log) are set; the
fault-injection tests use them to kill a real process between any two steps."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FAULT_LOG_ENV, KILL_AT_STEP_ENV = "MEDRECO_FAULT_LOG", "MEDRECO_KILL_AT_STEP"
_TEMPORARY_PREFIX = ".tmp."  # .tmp.<pid>.<thread>.<random>.<name>: files being written
_FOLDER_SUFFIXES = (".tmp", ".old")  # .<name>.tmp / .<name>.old: folders being written / swapped out


def fault_point(label: str) -> None:
    """A commit step (see the module docstring); free unless the fault-injection variables are set."""
    log = os.environ.get(FAULT_LOG_ENV)
    if not log:
        return
    with open(log, "a+") as handle:
        handle.seek(0)
        step = sum(1 for _ in handle) + 1
        handle.write(f"{label}\n")
        handle.flush()
        os.fsync(handle.fileno())
    if str(step) == os.environ.get(KILL_AT_STEP_ENV):
        os.kill(os.getpid(), signal.SIGKILL)


def fsync_path(path: str | Path) -> None:
    """Flush a file's or a folder's entry to disk (folders: the names they hold)."""
    descriptor = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0))
    try:
        os.fsync(descriptor)
    except OSError as error:  # some file systems cannot fsync a folder; the data itself was flushed
        if error.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(descriptor)


def fsync_tree(folder: str | Path) -> None:
    """Flush every file and folder under `folder`, then `folder` itself."""
    for root, _, files in os.walk(folder):
        for name in files:
            fsync_path(Path(root) / name)
        fsync_path(root)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def follow_umask(path: str | Path) -> None:
    """Give a written file (or every file and folder under a written folder) the mode the umask
    gives new files: some writers (safetensors) create theirs readable by the owner alone."""
    mask, path = _umask(), Path(path)
    for item in [path, *(path.rglob("*") if path.is_dir() else ())]:
        if item.is_symlink():
            continue
        os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)


@contextmanager
def atomic_path(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to `path` to write to; on success it is flushed and replaces `path`,
    with the mode the umask gives new files, or `mode` (e.g. 0o600 for what must stay private).

    The temporary name is unique per process and thread, so concurrent writers of the same file
    never share one; the last rename wins and every reader sees a whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the real name stays at the end: writers such as nibabel pick the format from the extension
    temporary = path.with_name(
        f"{_TEMPORARY_PREFIX}{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}.{path.name}"
    )
    try:
        yield temporary
        if mode is None:
            follow_umask(temporary)
        else:
            os.chmod(temporary, mode)
        fsync_path(temporary)
        fault_point(f"replace {path.name}")
        os.replace(temporary, path)
        fsync_path(path.parent)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> Path:
    """`Path.write_text`, atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text)
    return Path(path)


def save_figure(figure, path: str | Path, dpi: int = 110) -> Path:
    """A matplotlib figure, laid out and written atomically as the image its suffix names; closed after."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    with atomic_path(path) as temporary:
        figure.savefig(temporary, dpi=dpi)
    plt.close(figure)
    return Path(path)


def remove_atomically(path: str | Path) -> None:
    """Delete a committed file or folder (a commit step: a kill before it leaves it in place)."""
    path = Path(path)
    if not path.exists():
        return
    fault_point(f"remove {path.name}")
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    fsync_path(path.parent)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux `renameat2(RENAME_EXCHANGE)`); False where unsupported."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_current_folder, rename_exchange = -100, 2
    if renameat2(at_current_folder, os.fsencode(first), at_current_folder, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def recover_folder(target: str | Path) -> None:
    """Finish a folder swap a kill interrupted between its two renames (where no atomic exchange
    exists): the previous version, set aside as `.<name>.old`, goes back into place."""
    target = Path(target)
    old = target.with_name(f".{target.name}.old")
    if old.is_dir() and not target.exists():
        old.rename(target)


def commit_folder(temporary: str | Path, target: str | Path) -> Path:
    """Flush the folder `temporary` and swap it in as `target`; the previous `target` is removed."""
    temporary, target = Path(temporary), Path(target)
    follow_umask(temporary)
    fsync_tree(temporary)
    fault_point(f"commit {target.name}")
    if not target.exists():
        temporary.rename(target)
    elif _exchange(temporary, target):  # the previous version now sits at the temporary name
        fsync_path(target.parent)
        fault_point(f"remove previous {target.name}")
        shutil.rmtree(temporary)
    else:
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
        fault_point(f"swap in {target.name}")
        temporary.rename(target)
        fsync_path(target.parent)
        shutil.rmtree(old)
    fsync_path(target.parent)
    return target


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder path next to `path` (not created: writers such as
    `save_pretrained` create it); on success it is flushed and swapped in as `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(path)
    temporary = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        yield temporary
        if not temporary.is_dir():
            temporary.mkdir()
        commit_folder(temporary, path)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def save_folder_atomically(directory: str | Path, write) -> Path:
    """`write(folder)` into a temporary folder, then swap it in as `directory`: readers never see
    half a model."""
    with atomic_folder(directory) as temporary:
        write(temporary)
    return Path(directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(folder: str | Path, recursive: bool = False) -> list[Path]:
    """Remove what killed writers left in `folder`: temporary files of dead processes and the
    temporary or swapped-out folders of interrupted folder swaps (restored first if needed).
    Returns what was removed. Call only where no other writer works on the same folder's folders."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for entry in folder.rglob(".*") if recursive else folder.glob(".*"):
        name = entry.name
        if name.startswith(_TEMPORARY_PREFIX) and entry.is_file():
            pid = name[len(_TEMPORARY_PREFIX) :].split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                entry.unlink(missing_ok=True)
                removed.append(entry)
        elif entry.is_dir() and name.endswith(_FOLDER_SUFFIXES) and len(name) > 5:
            if name.endswith(".old"):
                recover_folder(entry.with_name(name[1:-4]))
            if entry.exists():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


__all__ = [
    "atomic_folder",
    "atomic_path",
    "commit_folder",
    "follow_umask",
    "save_figure",
    "fault_point",
    "fsync_path",
    "fsync_tree",
    "recover_folder",
    "remove_atomically",
    "remove_stale_temporaries",
    "save_folder_atomically",
    "write_text_atomically",
]
