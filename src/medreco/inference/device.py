"""Where inference runs: a device, a precision and, for a VLM larger than one GPU, a device map.

Every inference entry point (`RetrievalEncoder`, `RerankerScorer`, `ComparativeReader`, index
building, the evaluations) takes one `InferenceDevice`; the CLI builds it from `--device`,
`--dtype` and `--device-map`. A setting the machine cannot honour (CUDA on a machine without it, a
GPU index past the last GPU, float16 on a CPU) is refused when the object is made, before any
model is read. The retrieval models keep float32 weights whatever the precision (the index's
model fingerprint, its cosines and the logit scale stay those of the saved model) and compute under
autocast; the VLM, the large one, is loaded in the precision itself."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MedReCoError

if TYPE_CHECKING:
    import torch

# torch is imported where a device is made, not here: the CLI reads these names for its help
DTYPE_NAMES = ("float32", "bfloat16", "float16")
DTYPE_CHOICES = ("auto", *DTYPE_NAMES)
DEVICE_HELP = "auto (a CUDA GPU when there is one, else the CPU), cpu, cuda, cuda:N or mps"


class DeviceError(MedReCoError, ValueError):
    """A device, precision or device map that this machine cannot run; names the setting."""


def _cuda_summary() -> str:
    import torch

    build = torch.version.cuda or "none (a CPU build)"
    return f"torch {torch.__version__}, CUDA {build}, {torch.cuda.device_count()} GPU(s) visible"


def parse_device(name: str) -> torch.device:
    """The torch device `name` means on this machine; "auto" is the current CUDA GPU (the first,
    unless the process chose another) if torch sees one, else the CPU."""
    import torch

    text = str(name).strip().lower()
    if text == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise DeviceError(f"--device {name!r}: not a device; use {DEVICE_HELP}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"--device {name}: CUDA is not available here ({_cuda_summary()}); use --device cpu")
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise DeviceError(f"--device {name}: there is no GPU {index} ({_cuda_summary()})")
        return torch.device("cuda", index)
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(f"--device {name}: Apple's MPS backend is not available here; use --device cpu")
        return device
    if device.type == "cpu":
        return torch.device("cpu")
    raise DeviceError(f"--device {name!r}: medreco runs on {DEVICE_HELP}")


@dataclass(frozen=True)
class InferenceDevice:
    """device: see `DEVICE_HELP`. dtype: the compute precision, "auto" (bfloat16 on a GPU that has
    it, float16 on an older one, float32 on a CPU or MPS), float32, bfloat16 or float16 (GPU only).
    device_map: for the VLM only, handed to `from_pretrained` (e.g. "auto", with accelerate, to
    spread a large model over the GPUs); the model is then not moved as a whole."""

    device: str = "auto"
    dtype: str = "auto"
    device_map: str | None = None

    def __post_init__(self) -> None:
        torch_device = parse_device(self.device)  # refuses what this machine has not
        if self.dtype not in DTYPE_CHOICES:
            raise DeviceError(f"--dtype {self.dtype!r}: not a precision; use one of {', '.join(DTYPE_CHOICES)}")
        if self.dtype == "float16" and torch_device.type == "cpu":
            raise DeviceError("--dtype float16 needs a GPU; use bfloat16 or float32 on a CPU")
        if self.device_map is not None and torch_device.type != "cuda":
            raise DeviceError(f"--device-map {self.device_map}: a device map spreads a model over GPUs; none here")

    @property
    def torch_device(self) -> torch.device:
        return parse_device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        if self.dtype != "auto":
            return getattr(torch, self.dtype)
        device = self.torch_device
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for a forward pass on this device (nothing at float32)."""
        import torch

        dtype = self.torch_dtype
        if dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.torch_device.type, dtype=dtype)

    def place(self, model: torch.nn.Module) -> torch.nn.Module:
        """A float32-weights model (the retrieval models) moved to the device, in eval mode."""
        return model.to(self.torch_device).eval()

    def vlm_loading(self) -> dict:
        """`from_pretrained` arguments for the VLM: its weights in the compute precision, on the
        device or spread by the device map."""
        arguments: dict = {"dtype": self.torch_dtype}
        if self.device_map is not None:
            arguments["device_map"] = self.device_map
        return arguments

    def describe(self) -> str:
        """One line for logs: "cuda:0, bfloat16"."""
        placed = f"device map {self.device_map}" if self.device_map else str(self.torch_device)
        return f"{placed}, {str(self.torch_dtype).removeprefix('torch.')}"


__all__ = ["DEVICE_HELP", "DTYPE_CHOICES", "DeviceError", "InferenceDevice", "parse_device"]
