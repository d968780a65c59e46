"""Stage-2 step time with the frozen image features remembered (`remember_frozen_features`) against
the plain step, in one process: forward, backward and AdamW on batches of two-image conversations
whose images the memo has already seen (the steady state of a run that sees each image many times).

At the demo's size (tiny vision encoder, 40-pixel images, the demo's 4-layer language model) the
language model dominates a step, so the memo saves little; with the paper's vision encoder at 480
pixels it is most of the step.

    python benchmarks/vlm_feature_memo.py                   # the demo's sizes, batch 16
    python benchmarks/vlm_feature_memo.py --preset paper --batch 2 --steps 3
"""

from __future__ import annotations

import argparse
import time


def build(preset: str):
    import medreco

    text = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4} if preset == "tiny" else {}
    overrides = {"text_config": {**text, "vocab_size": 2000}} if text else {}
    model = medreco.create_model("vlm", preset, image_token_id=5, **overrides)
    model.set_turn_tokens(6, 0)
    return model


def batches(model, batch: int, count: int, seed: int = 0) -> list[dict]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    vision = model.config.vision_config
    size = vision.image_size if isinstance(vision.image_size, int) else vision.image_size[-1]
    tokens = model.config.image_seq_length
    ids = [1, 2, *[5] * tokens, 3, *[5] * tokens, *range(10, 50), 6]
    out = []
    for _ in range(count):
        input_ids = torch.tensor([ids] * batch)
        out.append(
            {
                "input_ids": input_ids,
                "labels": input_ids.clone(),
                "pixel_values": torch.rand(2 * batch, 1, 1, size, size, generator=generator),
                "modality_ids": torch.zeros(2 * batch, dtype=torch.long),
            }
        )
    return out


def seconds_per_step(model, data: list[dict], repeats: int) -> float:
    import torch

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()
    for inputs in data:  # warm-up: fills the memo when it is on
        model(**inputs).loss.backward()
    optimizer.zero_grad()
    start = time.perf_counter()
    for _ in range(repeats):
        for inputs in data:
            model(**inputs).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return (time.perf_counter() - start) / (repeats * len(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny", choices=["tiny", "paper"])
    parser.add_argument("--batch", type=int, default=16, help="conversations per step (two images each)")
    parser.add_argument("--steps", type=int, default=8, help="distinct batches, each run --repeats times")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = build(args.preset)
    data = batches(model, args.batch, args.steps)
    plain = seconds_per_step(model, data, args.repeats)
    model.remember_frozen_features()
    remembered = seconds_per_step(model, data, args.repeats)
    print(f"preset {args.preset}, batch {args.batch}: plain {plain * 1000:.1f} ms/step")
    print(f"  remembered frozen features: {remembered * 1000:.1f} ms/step, ratio {remembered / plain:.2f}")


if __name__ == "__main__":
    main()
