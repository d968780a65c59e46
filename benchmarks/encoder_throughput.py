"""Vision-encoder throughput at the paper's size on this machine's CPU.

Prints images/s (2D 480x480) and volumes/s (3D 240x480x480), fp32 and bf16, and the achieved
FLOP/s of each as a fraction of a plain matmul's FLOP/s measured in the same run and dtype.
FLOPs are counted by torch's FlopCounterMode on one forward pass (matmuls, convs, attention).

    python benchmarks/encoder_throughput.py [--batch-2d 8] [--repeats 2] [--skip-3d]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

import medreco


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_flops_per_second(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    return 2 * size**3 / best_time(lambda: a @ b, repeats)


def count_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-2d", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-3d", action="store_true")
    args = parser.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    model = medreco.create_model("vision", "paper").eval()
    cases = [("2D 480x480", torch.rand(args.batch_2d, 1, 1, 480, 480), torch.zeros(args.batch_2d, dtype=torch.long))]
    if not args.skip_3d:
        cases.append(("3D 240x480x480", torch.rand(1, 1, 240, 480, 480), torch.ones(1, dtype=torch.long)))

    header = ("input", "dtype", "items/s", "GFLOP/item", "GFLOP/s", "matmul GFLOP/s", "fraction")
    print(f"{header[0]:<16} {header[1]:<9} " + " ".join(f"{h:>{w}}" for h, w in zip(header[2:], (9, 11, 9, 15, 9))))
    for dtype in (torch.float32, torch.bfloat16):
        peak = matmul_flops_per_second(dtype)
        typed = model.to(dtype)
        for name, pixels, ids in cases:
            pixels = pixels.to(dtype)

            def forward(pixels=pixels, ids=ids, typed=typed):
                with torch.inference_mode():
                    typed(pixels, ids)

            flops = count_flops(forward)
            seconds = best_time(forward, args.repeats)
            items = pixels.shape[0]
            achieved = flops / seconds
            dtype_name = str(dtype).removeprefix("torch.")
            print(
                f"{name:<16} {dtype_name:<9} {items / seconds:>9.2f} {flops / items / 1e9:>11.1f} "
                f"{achieved / 1e9:>9.1f} {peak / 1e9:>15.1f} {achieved / peak:>9.2f}"
            )


if __name__ == "__main__":
    main()
