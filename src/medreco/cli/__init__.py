"""The `medreco` command line: it parses and dispatches, the work is the Python API's.

Each module of this package is one group of sub-commands. A sub-command is a pair of small
functions, `_<name>_arguments(parser)` declaring its options and `_<name>(args)` calling the API and
printing the result; the module lists them as `Command`s in its `COMMANDS`, and `GROUPS` gives the
help order. `main` is the one entry point: a failure a user can cause exits with status 2 and one
line naming the file and the problem."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from . import data, demo, evaluation, hub, images, inference, info, public_datasets, training
from .command import Command

# in help order (and the order `invalid choice` messages list them in): `manifest`, the newest, last
GROUPS = (info, hub, images, data, training, inference, evaluation, demo, public_datasets)
COMMANDS: list[Command] = [command for group in GROUPS for command in group.COMMANDS]


VERBOSE_HELP = "log progress at INFO level, and show the libraries' own progress bars"


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (like every other failure) instead of the usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already states it or there is none
    to state (no value, a switch that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings or default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default {shown})".replace("%", "%%") if text else f"default {shown}".replace("%", "%%")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"medreco {version('medreco')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "medreco (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="medreco", description="Comparative reasoning in radiology.", formatter_class=_HelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for spec in COMMANDS:
        command = commands.add_parser(spec.name, help=spec.help, description=spec.help, formatter_class=_HelpFormatter)
        spec.arguments(command)
        # -v after the command too; SUPPRESS keeps a -v given before it
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        command.set_defaults(handler=spec.run)
    return parser


def failure_line(error: BaseException) -> str:
    """One line naming the path and the problem, for an expected failure."""
    if isinstance(error, ModuleNotFoundError):
        extra = {
            **dict.fromkeys(("accelerate", "trl", "peft"), "train"),
            **{"faiss": "index", "matplotlib": "ui", "markdown_it": "demo", "evaluate": "evaluate"},
        }
        hint = extra.get((error.name or "").split(".")[0])
        advice = f'pip install "medreco[{hint}]"' if hint else f"pip install {error.name}"
        return f"needs the package {error.name!r} ({advice})"
    if isinstance(error, OSError) and error.filename is not None:
        paths = " -> ".join(str(p) for p in (error.filename, error.filename2) if p is not None)
        text = f"{paths}: {error.strerror or error.__class__.__name__}"
    else:
        text = str(error) or error.__class__.__name__
    return " ".join(text.split())  # messages listing several items fold into the one line


OUTPUT_ARGUMENTS = ("out", "plot", "destination", "pseudonyms")


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse an output that cannot be written before any work is done: its nearest existing
    ancestor must be a writable folder (a file there, or a read-only folder, is found in a second,
    not after an hour of encoding)."""
    import errno
    import os

    for name in OUTPUT_ARGUMENTS:
        value = getattr(args, name, None)
        if not value:
            continue
        ancestor = Path(value).absolute().parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file, so nothing can be written under it", str(ancestor))
        if not os.access(ancestor, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", str(ancestor))


def _hide_library_progress_bars() -> None:
    """transformers' own bars ("Loading weights", "Writing model shards") say nothing a user acts
    on; ours (encoding, training, mining) and huggingface_hub's (downloads and uploads: a first
    download of a large model takes minutes) stay. `-v` shows them all."""
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    # transformers reads the global switch when it is imported (later, in the command) ...
    with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS set by the user has the last word
        warnings.simplefilter("ignore")
        disable_progress_bars()
        if "transformers" in sys.modules:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()
        enable_progress_bars("huggingface_hub")  # ... and the Hub's own groups turn back on


def main(argv: list[str] | None = None) -> int:
    """The `medreco` command: every failure a user can cause (a bad argument, a missing, damaged or
    unwritable path, a missing package) ends with exit status 2 and one line on stderr naming the
    path and the problem; an interruption with 130. Anything else is a bug and shows its traceback."""
    from huggingface_hub.errors import StrictDataclassError  # a config field a recipe or preset set wrong

    from ..errors import MedReCoError

    args = build_parser().parse_args(argv)
    if not args.verbose:
        _hide_library_progress_bars()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        check_output_paths(args)
        return args.handler(args)
    except BrokenPipeError:  # the reader of the output stopped early (`medreco info | head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (MedReCoError, ValueError, OSError, ImportError, StrictDataclassError) as error:
        print(f"medreco {args.command}: error: {failure_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"medreco {args.command}: interrupted (what was committed is kept; run it again to resume)", file=sys.stderr
        )
        return 130
