#!/usr/bin/env bash
# Instruction-tune an exported MedReCo VLM with TRL's own `trl sft` script, unmodified.
#
#   MODEL  a VLM folder written by `medreco export` or `medreco train stage2` (or a Hub id ORG/NAME)
#   DATA   a dataset in TRL's conversational image format: `messages` whose user turns hold
#          {"type": "image"} placeholders, and an `images` column (a local folder of parquet/json
#          files, or a Hub dataset id)
#   OUT    where the trained model goes (it loads and pushes like MODEL)
#
# Extra arguments pass through to `trl sft`, later ones winning, e.g.
#   --use_peft --lora_target_modules q_proj k_proj v_proj o_proj    LoRA; OUT holds the adapter alone
#   --use_cpu --max_steps 2                                         a smoke run on a laptop
#
# --max_length 8192: every image is a block of placeholder tokens (576 for a 480x480 radiograph with
# the paper's 20-pixel patches); TRL's default (1024) would cut them.
set -euo pipefail
: "${MODEL:?set MODEL to an exported MedReCo VLM folder or Hub id}"
: "${DATA:?set DATA to a dataset with messages and images}"
: "${OUT:?set OUT to the output folder}"

trl sft \
    --model_name_or_path "$MODEL" \
    --trust_remote_code \
    --dataset_name "$DATA" \
    --output_dir "$OUT" \
    --assistant_only_loss \
    --max_length 8192 \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 4 \
    --learning_rate 2e-5 \
    --num_train_epochs 1 \
    --report_to none \
    "$@"
