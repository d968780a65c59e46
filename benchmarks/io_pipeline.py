"""A 240-slice 512x512 CT series to the paper's model tensor (240x480x480 at 1.5x0.75x0.75 mm).

medreco's path (read + HU window + one-pass resample/crop/pad) against MONAI's standard pipeline
(LoadImage + Orientation + Spacing + ScaleIntensityRange + ResizeWithPadOrCrop), run in the same
process on the same files; then medreco with its tensor cache warm. Prints seconds and ratios.

    python benchmarks/io_pipeline.py [--slices 240] [--repeats 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from medreco.data.phantom.dicom import DicomIdentity, write_ct_series
from medreco.data.phantom.findings import FINDING_TYPES, sample_finding
from medreco.data.phantom.render import Anatomy, Grid, render_thorax_hu
from medreco.processing import MedReCoImageProcessor


def write_study(folder: Path, slices: int) -> None:
    rng = np.random.default_rng(0)
    spacing = (1.25, 0.7, 0.7)
    grid = Grid((slices, 512, 512), spacing, (170 - slices * 1.25 / 2, -179.0, -179.0))
    findings = [sample_finding(key, rng, True) for key in FINDING_TYPES]
    volume = np.round(render_thorax_hu(grid, Anatomy(), findings, rng))
    write_ct_series(volume, spacing, folder, DicomIdentity(), origin=(grid.origin[2], grid.origin[1], grid.origin[0]))


def monai_pipeline():
    from monai.transforms import Compose, LoadImage, Orientation, ResizeWithPadOrCrop, ScaleIntensityRange, Spacing

    return Compose(
        [
            LoadImage(image_only=True, ensure_channel_first=True, reader="PydicomReader"),
            Orientation(axcodes="RAS"),
            Spacing(pixdim=(0.75, 0.75, 1.5), mode="bilinear"),
            ScaleIntensityRange(a_min=-1000, a_max=1000, b_min=0.0, b_max=1.0, clip=True),
            ResizeWithPadOrCrop((480, 480, 240)),
        ]
    )


def best(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slices", type=int, default=240)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        series = Path(tmp) / "series"
        write_study(series, args.slices)
        ours = MedReCoImageProcessor()
        cached = MedReCoImageProcessor(tensor_cache_dir=str(Path(tmp) / "cache"))
        monai = monai_pipeline()

        ours_time, ours_tensor = best(lambda: ours.preprocess_one(series, "chest_ct"), args.repeats)
        monai_time, monai_tensor = best(lambda: monai(str(series)), args.repeats)
        cached.preprocess_one(series, "chest_ct")  # fill the cache
        cached_time, cached_tensor = best(lambda: cached.preprocess_one(series, "chest_ct"), args.repeats)

    print(f"input: {args.slices} DICOM slices of 512x512 at 1.25 x 0.7 x 0.7 mm")
    print(f"medreco output {tuple(ours_tensor.shape)}, MONAI output {tuple(monai_tensor.shape)} (C, X, Y, Z)")
    print(f"{'pipeline':<28} {'seconds':>8} {'speed-up vs MONAI':>18}")
    print(f"{'MONAI standard (cold)':<28} {monai_time:>8.2f} {1.0:>18.1f}")
    print(f"{'medreco (cold)':<28} {ours_time:>8.2f} {monai_time / ours_time:>18.1f}")
    print(f"{'medreco (tensor cache)':<28} {cached_time:>8.2f} {monai_time / cached_time:>18.1f}")
    difference = float(abs(cached_tensor - ours_tensor).max())
    print(f"cached vs fresh max abs difference: {difference:.4f} (float16 storage)")
    # MONAI gives (C, X, Y, Z) in RAS; medreco (C, D, H, W) toward S, P, L: permute and flip to compare
    theirs = torch.as_tensor(np.asarray(monai_tensor))[0].permute(2, 1, 0).flip(1, 2)
    agreement = float((theirs - ours_tensor[0]).abs().mean())
    print(f"mean abs difference from MONAI's output: {agreement:.4f} (intensities in [0, 1])")


if __name__ == "__main__":
    main()
