"""Instruction-tune a MedReCo VLM with TRL's `SFTTrainer` in Python: what `trl sft` does, in a page.

    python examples/sft_python.py MODEL DATA OUT [--lora] [--max-steps N] [--cpu]

MODEL: a VLM folder (`medreco export`, `medreco train stage2`) or Hub id; DATA: a dataset in TRL's
conversational image format (`messages` + `images`); OUT: the trained model, or with `--lora` the
adapter alone (push it with `medreco push OUT --repo-id ORG/NAME`). Works without medreco installed:
the model folder carries its code."""

from __future__ import annotations

import argparse

from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import SFTConfig, SFTTrainer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters on the language model only")
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args(argv)

    processor = AutoProcessor.from_pretrained(args.model, trust_remote_code=True)
    model = AutoModelForImageTextToText.from_pretrained(args.model, trust_remote_code=True)
    dataset = load_dataset(args.data, split="train")
    # The vision encoder has q/k/v/o projections too: a regex keeps the adapters in the language model.
    lora = LoraConfig(
        r=16,
        lora_alpha=32,
        lora_dropout=0.05,
        target_modules=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)",
        modules_to_save=["multi_modal_projector"],
        task_type="CAUSAL_LM",
    )
    config = SFTConfig(
        output_dir=args.out,
        max_steps=args.max_steps,
        per_device_train_batch_size=2,
        learning_rate=args.learning_rate,
        assistant_only_loss=True,  # the processor's chat template marks the answers
        max_length=None,  # never cut an image's placeholder tokens
        use_cpu=args.cpu,
        report_to="none",
        save_strategy="no",
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=processor,
        peft_config=lora if args.lora else None,
    )
    trainer.train()
    trainer.save_model()  # with --lora: the adapter alone (adapter_config.json + adapter_model.safetensors)
    processor.save_pretrained(args.out)


if __name__ == "__main__":
    main()
