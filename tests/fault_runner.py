"""A warm process that runs commands in forked children, for the fault-injection tests.

Importing torch, transformers and medreco takes seconds; killing a run at each of its commit
steps means dozens of runs. This process imports once and forks a child per request, so each run
is a real, separate process that `fault_point` can kill with SIGKILL, at the cost of a fork. It
never runs torch itself before forking (a forked child inherits no thread pools).

Protocol: one JSON request per line on stdin, {"argv": [...]} (the `medreco` command line) or
{"call": "module:function", "args": [...]}, with optional "env" (set in the child only), "log"
(the child's stderr, and its stdout unless "stdout" names another file); one JSON line back per
request: {"code", "signal"}."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

from medreco.atomic import FAULT_LOG_ENV, KILL_AT_STEP_ENV


def _child(request: dict) -> int:
    os.environ.update(request.get("env", {}))
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    log = os.open(request.get("log", os.devnull), flags)
    os.dup2(os.open(request["stdout"], flags) if "stdout" in request else log, 1)
    os.dup2(log, 2)
    try:
        if "argv" in request:
            from medreco.cli import main

            return main(request["argv"])
        module, function = request["call"].split(":")
        return getattr(importlib.import_module(module), function)(*request.get("args", [])) or 0
    except SystemExit as exit_:  # argparse's usage errors, as the `medreco` script would exit
        return exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1


def serve() -> None:
    import medreco.cli
    import medreco.data.mining
    import medreco.inference
    import medreco.training.checkpoint  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = _child(request)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 0)
        _, status = os.waitpid(pid, 0)
        answer = {
            "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        }
        print(json.dumps(answer), flush=True)


def train_with_checkpoints(out: str, steps: int) -> int:
    """A small training run that checkpoints after every step and resumes from the latest one:
    the target for killing `CheckpointManager.save` at each of its steps. Writes the final weights
    to `out/final.safetensors`."""
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    from medreco.training.checkpoint import CheckpointManager, TrainingState

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    manager = CheckpointManager(Path(out) / "checkpoints", keep=2)
    state = manager.load(model, optimizer, scheduler) if manager.latest() else TrainingState()
    while state.step < steps:
        loss = model(torch.randn(16, 8)).pow(2).mean()  # data from the (checkpointed) RNG
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        state.step += 1
        manager.save(model, optimizer, scheduler, state)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(Path(out) / "final.safetensors"))
    return 0


class WarmRunner:
    """The client: starts `serve` in a new process; `run` has it fork one child per request
    (with `kill_at`, killed before that commit step; with `count`, its steps logged there)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def run(self, request: dict, log: Path, kill_at: int | None = None, count: Path | None = None) -> dict:
        env = dict(request.get("env", {}))
        if count is not None or kill_at is not None:
            env[FAULT_LOG_ENV] = str(count or log.with_suffix(".steps"))
        if kill_at is not None:
            env[KILL_AT_STEP_ENV] = str(kill_at)
        self.process.stdin.write(json.dumps({**request, "env": env, "log": str(log)}) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    serve()
