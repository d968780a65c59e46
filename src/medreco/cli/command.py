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


def device_arguments(parser: argparse.ArgumentParser, device_map: bool = False) -> None:
    """--device and --dtype (and, for the VLM, --device-map): where inference runs."""
    from ..inference.device import DEVICE_HELP, DTYPE_CHOICES

    parser.add_argument("--device", default="auto", help=f"where the models run: {DEVICE_HELP} (default auto)")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPE_CHOICES,
        help="compute precision (default auto: bfloat16 on a GPU that has it, float32 on a CPU)",
    )
    if device_map:
        parser.add_argument(
            "--device-map",
            help='spread the VLM over the GPUs with this transformers device map (e.g. "auto"; needs accelerate)',
        )


def inference_device(args: argparse.Namespace):
    """The `InferenceDevice` of --device/--dtype/--device-map; refuses what this machine lacks."""
    from ..inference.device import InferenceDevice

    return InferenceDevice(args.device, args.dtype, getattr(args, "device_map", None))


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (`--top-k 0` is refused in one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def modality(text: str) -> str:
    """An argparse type: a canonical modality (`chest_ct`) from its name or an alias (`cxr`, `DX`, `MR`,
    `chest x-ray`; any case), as manifests take them; `CT` alone is refused, naming the choices."""
    from ..data.reports.ontology import canonical_modality

    try:
        return canonical_modality(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def modality_or_family(text: str) -> str:
    """`modality`, or a vocabulary family that several modalities share (`CT`: chest and abdominal)."""
    from ..data.reports.ontology import MODALITY_FAMILY

    families = {family.lower(): family for family in MODALITY_FAMILY.values()}
    return families.get(text.strip().lower()) or modality(text)


def modalities(text: str) -> tuple[str, ...]:
    """A comma-separated list of `modality` names."""
    return tuple(modality(name) for name in names(text))


def names(text: str) -> tuple[str, ...]:
    """ "a, b" -> ("a", "b")"""
    return tuple(name.strip() for name in text.split(",") if name.strip())
