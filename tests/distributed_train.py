"""Run under torchrun by tests: a short stage-1 ranking run on the toy task, then each rank
writes a digest of its final weights (DDP) and rank 0 saves the model (DeepSpeed)."""

import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from medreco.training import load_recipe
from medreco.training.stage1 import Stage1Trainer
from toy_mined import RECIPES


def main(mined: str, out: str, deepspeed: str = "", *extra: str) -> None:
    overrides = [
        f"data.mined_dir={mined}",
        f"run.output_dir={out}",
        "run.progress=false",
        "alignment.epochs=0",
        "ranking.max_steps=4",
        "ranking.batch_size_2d=4",
        "ranking.mixed_precision=no",
        "run.report_to=[]",
        f"data.recipes={json.dumps(RECIPES)}",
    ]
    if deepspeed:
        overrides.append(f"run.deepspeed_config={deepspeed}")
    overrides += extra  # more recipe overrides
    torch.manual_seed(0)
    trainer = Stage1Trainer(load_recipe("tiny", "stage1", overrides))
    trainer.train()
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    digest = hashlib.sha256()
    for name, tensor in sorted(trainer.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    Path(out, f"rank{rank}.sha256").write_text(digest.hexdigest())


if __name__ == "__main__":
    main(*sys.argv[1:])
