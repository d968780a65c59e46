"""A model named by a local folder or a Hub repository, as `from_pretrained` names one.

A folder that exists is used as it is. Otherwise `ORG/NAME` (optionally `ORG/NAME@REVISION`) is
a Hub repository: downloaded once into huggingface_hub's cache, with its progress bars (a first
download of a large model is minutes, not a hang), and read from the cache afterwards, offline
too. Every inference class and command takes either."""

from __future__ import annotations

import errno
import logging
import re
from pathlib import Path

from ..errors import MedReCoError

logger = logging.getLogger(__name__)

REPO_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelSourceError(MedReCoError, ValueError):
    """A Hub repository that does not exist, is private, lacks the revision, or is not cached
    while the Hub cannot be reached; names the repository."""


def split_revision(name: str) -> tuple[str, str | None]:
    """ "org/name@v1" -> ("org/name", "v1"); no "@": (name, None)."""
    repo, at, revision = name.partition("@")
    return repo, (revision or None) if at else None


def model_folder(name_or_path: str | Path, revision: str | None = None) -> Path:
    """The local folder of a model: `name_or_path` itself if it exists, else the downloaded (or
    cached) snapshot of the Hub repository it names."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    repo_id, named_revision = split_revision(str(name_or_path))
    if not REPO_NAME.match(repo_id):
        raise FileNotFoundError(errno.ENOENT, "no such folder (nor a Hub repository name ORG/NAME)", str(name_or_path))
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    revision = revision or named_revision
    try:
        folder = snapshot_download(repo_id, revision=revision)
    except GatedRepoError:
        raise ModelSourceError(f"{repo_id}: a gated repository; accept its terms on the Hub and log in") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(
            f"{name_or_path}: no such folder here and no Hub model repository of that name (a private one needs "
            "`hf auth login` or HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"{repo_id}: the Hub repository has no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        raise ModelSourceError(
            f"{name_or_path}: not a local folder, not in the Hub cache, and the Hub cannot be reached "
            "(offline, or HF_HUB_OFFLINE is set)"
        ) from None
    logger.info("%s%s: %s", repo_id, f"@{revision}" if revision else "", folder)
    return Path(folder)


__all__ = ["ModelSourceError", "model_folder", "split_revision"]
