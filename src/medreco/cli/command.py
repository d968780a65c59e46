"""What a `medreco` sub-command is, and the option parsers several commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One sub-command: `arguments(parser)` declares its options, `run(args)` calls the Python API,
    prints the result and returns the exit status. Each group module lists its own in `COMMANDS`."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def names(text: str) -> tuple[str, ...]:
    """ "a, b" -> ("a", "b")"""
    return tuple(name.strip() for name in text.split(",") if name.strip())
