"""Stage 2 (`medreco train stage2`): comparative instruction tuning with TRL's SFTTrainer.

Each mined VQA sample becomes a conversation: two images (Case A, Case B) and a question; the
assistant's answer is the only supervised text (TRL's `assistant_only_loss` with our processor's
assistant masks; image placeholders are never in the loss). The vision encoder comes from stage 1
and stays frozen; the projector and the language model train with their own learning rates
(paper: 1e-4 and 2e-5). PEFT LoRA on the language model is an option; QLoRA (4-bit) needs CUDA.

Images of one batch must share a shape, so the dataset is laid out in modality-homogeneous blocks of
one batch each (shuffled per epoch) and read in that order."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import SequentialSampler
from transformers import AutoTokenizer, set_seed

from ..atomic import save_folder_atomically
from ..data.mining import MinedData
from ..data.mining.questions import presence_subject
from ..data.mining.swap import swapped_row
from ..data.mining.vqa import closed_answer, closed_prompt, longitudinal_questions
from ..data.reports.ontology import Ontology, entity_prompts
from ..errors import TrainingDataError
from ..factory import create_model, preset_fields, resolve_text_encoder
from ..modeling import MedReCoForConditionalGeneration, MedReCoModel
from ..processing import (
    MedReCoImageProcessor,
    MedReCoProcessor,
    conversation,
    template_texts,
    train_wordpiece_tokenizer,
)
from .config import RecipeError, Stage2Config
from .data import check_nonempty, is_volumetric, refuse_train_transforms
from .distributed import (
    check_deepspeed_launch,
    deepspeed_requested,
    fresh_copy,
    fsdp_requested,
    gathered_state_dict,
    is_main_launch_process,
    load_whole_state,
    parameter_share,
    release_engine,
    strategy_name,
    use_fsdp_on_cpu,
)
from .launch import deepspeed_config_path
from .loop import available_trackers, resolve_mixed_precision, write_run_record

logger = logging.getLogger(__name__)
MINED_TOKENIZER = "mined"  # Stage2Config.tokenizer: learn a vocabulary from the training conversations


def closed_rows(
    data: MinedData, split: str, include_longitudinal: bool = True, longitudinal_repeats: int = 1
) -> Sequence[dict]:
    """The split's VQA rows (a view of the mined table), then (optionally) its longitudinal follow-up
    questions in the same columns, each `longitudinal_repeats` times."""
    rows = data.rows("vqa", split)
    if include_longitudinal:
        rows = rows + longitudinal_questions(data.rows("longitudinal", split), Ontology.load()) * longitudinal_repeats
    return rows


def _kept_share(key: str, share: float) -> bool:
    """Whether an item of stable `key` falls in the first `share` of a fixed hash order."""
    if share >= 1.0:
        return True
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) < share * 16**8


def vqa_examples(
    data: MinedData,
    split: str,
    include_open_ended: bool,
    include_longitudinal: bool = True,
    entity_tokens: bool = False,
    longitudinal_repeats: int = 1,
    open_ended_share: float = 1.0,
    swapped_twin_share: float = 0.0,
) -> list[dict]:
    """Conversations (messages + image paths + modality) from the mined VQA and longitudinal tables
    (each follow-up question `longitudinal_repeats` times; the open-ended twins of `open_ended_share`
    of the closed questions and the swapped twins (`data.mining.swap`) of `swapped_twin_share`, each
    chosen by a hash of the question); with `entity_tokens`, the image blocks name the row's entity."""
    examples = []
    for row in closed_rows(data, split, include_longitudinal, longitudinal_repeats):
        key = f"{row['study_a']}:{row['study_b']}:{row['entity_id']}:{row.get('dimension')}"
        examples.append(_closed_example(data, row, entity_tokens))
        if include_open_ended and row.get("open_question") and _kept_share(key, open_ended_share):
            examples.append(_closed_example(data, row, entity_tokens, open_ended=True))
        if swapped_twin_share > 0 and _kept_share("swap:" + key, swapped_twin_share):
            twin = swapped_row(row)
            if twin is not None:
                examples.append(_closed_example(data, twin, entity_tokens))
    return examples


def _closed_example(data: MinedData, row: dict, entity_tokens: bool, open_ended: bool = False) -> dict:
    """The conversation of a closed VQA row (or of its open-ended twin) with its two images."""
    modality = data.studies[row["study_a"]].modality
    if open_ended:
        question, answer = row["open_question"], row["open_answer"]
    else:
        question, answer = closed_prompt(row["question"], row["options"]), closed_answer(row["options"], row["answer"])
    return {
        "messages": conversation(question, modality, answer, entity=row["entity_id"] if entity_tokens else None),
        "images": [data.studies[row["study_a"]].image, data.studies[row["study_b"]].image],
        "modality": modality,
    }


def _yes_no_example(question: str, positive: bool, images: list, modality: str, entity: str | None) -> dict:
    """A presence question about `images` answered "A. Yes" or "B. No"."""
    options = ["Yes", "No"]
    return {
        "messages": conversation(
            closed_prompt(question, options),
            modality,
            closed_answer(options, "A" if positive else "B"),
            entity=entity,
            image_count=len(images),
        ),
        "images": images,
        "modality": modality,
    }


def presence_examples(data: MinedData, split: str, entity_tokens: bool = False) -> list[dict]:
    """One single-image conversation per study and entity its report is positive or negative about:
    "Does this image show X?" answered "A. Yes" or "B. No" (the curriculum's first phase)."""
    entities = {entity.id: entity for entity in Ontology.load().entities()}
    examples = []
    for study_id in data.study_ids(split):
        study = data.studies[study_id]
        for entity_id in sorted(study.statements):
            status = study.status(entity_id)
            if status not in ("positive", "negative") or entity_id not in entities:
                continue
            question = f"Does this image show {presence_subject(entities[entity_id])}?"
            entity = entity_id if entity_tokens else None
            examples.append(_yes_no_example(question, status == "positive", [study.image], study.modality, entity))
    return examples


def case_presence_examples(data: MinedData, split: str, entity_tokens: bool = False) -> list[dict]:
    """Two-image conversations that ask about one case: for each mined presence question of the
    split, "Does Case A show X?" and "Does Case B show X?", answered "A. Yes" or "B. No" from that
    study's report (when it is positive or negative about X): the language model learns which
    image block is which case before it compares them (`curriculum_questions: each_case`)."""
    entities = {entity.id: entity for entity in Ontology.load().entities()}
    examples = []
    for row in data.rows("vqa", split):
        entity = entities.get(row["entity_id"])
        if row.get("dimension") != "presence" or entity is None:
            continue
        studies = [data.studies[row["study_a"]], data.studies[row["study_b"]]]
        images = [study.image for study in studies]
        for label, study in zip(row.get("labels") or ("Case A", "Case B"), studies, strict=True):
            status = study.status(row["entity_id"])
            if status not in ("positive", "negative"):
                continue
            question = f"Does {label} show {presence_subject(entity)}?"
            named = row["entity_id"] if entity_tokens else None
            examples.append(_yes_no_example(question, status == "positive", images, study.modality, named))
    return examples


def homogeneous_order(examples: list[dict], batch_size: int, epochs: int, seed: int) -> list[dict]:
    """Examples laid out so that every consecutive `batch_size` block has one modality; blocks are
    shuffled per epoch and incomplete blocks dropped."""
    ordered = []
    for epoch in range(epochs):
        rng = random.Random(seed * 1_000_003 + epoch)
        blocks = []
        by_modality: dict[str, list[dict]] = {}
        for example in examples:
            by_modality.setdefault(example["modality"], []).append(example)
        for modality in sorted(by_modality):
            members = list(by_modality[modality])
            rng.shuffle(members)
            blocks += [members[i : i + batch_size] for i in range(0, len(members) - batch_size + 1, batch_size)]
        rng.shuffle(blocks)
        ordered += [example for block in blocks for example in block]
    return ordered


def conversation_texts(examples: list[dict]) -> list[str]:
    """Every text block of the examples' conversations (questions with options, answers)."""
    return [
        block["text"]
        for example in examples
        for message in example["messages"]
        for block in message["content"]
        if block["type"] == "text"
    ]


def build_tokenizer(config: Stage2Config, data: MinedData | None = None):
    """The VLM's tokenizer: a pretrained one by name or path, or (`tokenizer: mined`) a word-piece
    vocabulary learned from the training conversations of `data`."""
    tokenizer_name = config.tokenizer or config.language_model
    if tokenizer_name is None:
        raise RecipeError("stage2: set `tokenizer` (or `language_model`) so the VLM has a vocabulary")
    if tokenizer_name != MINED_TOKENIZER:
        return AutoTokenizer.from_pretrained(resolve_text_encoder(tokenizer_name))
    if config.language_model is not None:
        raise RecipeError(
            f"stage2: tokenizer={MINED_TOKENIZER} is for language models built from a preset; "
            f"{config.language_model} comes with its own tokenizer (leave `tokenizer` empty)"
        )
    if data is None:
        raise RecipeError(f"stage2: tokenizer={MINED_TOKENIZER} needs the mined data to learn from")
    texts = vocabulary_texts(data, "train", config)
    check_nonempty(texts, "training VQA samples", data.directory)
    tokenizer = train_wordpiece_tokenizer(texts, config.tokenizer_vocab_size)
    logger.info("stage2: learned a %d-token vocabulary from %d distinct training texts", len(tokenizer), len(texts))
    return tokenizer


def vocabulary_texts(data: MinedData, split: str, config: Stage2Config) -> Counter[str]:
    """The texts of the split's training conversations, each with how often it occurs: the closed
    questions and answers with their open-ended twins, the curriculum's presence questions, and the
    chat template's own text around every conversation (`template_texts`: system prompt, role names,
    image labels): the corpus of a mined vocabulary, all that the tokenizer meets in training."""
    texts: Counter[str] = Counter()
    conversations = 0
    for row in closed_rows(data, split, config.include_longitudinal):
        texts.update([closed_prompt(row["question"], row["options"]), closed_answer(row["options"], row["answer"])])
        conversations += 1
        if config.include_open_ended and row.get("open_question"):
            texts.update([row["open_question"], row["open_answer"]])
            conversations += 1
    if texts and config.curriculum_steps:
        curriculum = curriculum_examples(data, split, config)
        texts.update(conversation_texts(curriculum))
        conversations += len(curriculum)
    for text in template_texts():
        texts[text] += conversations
    return texts


def curriculum_examples(data: MinedData, split: str, config: Stage2Config) -> list[dict]:
    """The curriculum's presence questions (`curriculum_questions`): about one image
    (`presence_examples`) or one case of a pair (`case_presence_examples`)."""
    build = case_presence_examples if config.curriculum_questions == "each_case" else presence_examples
    return build(data, split, config.entity_tokens)


def build_vlm(
    config: Stage2Config, data: MinedData | None = None
) -> tuple[MedReCoForConditionalGeneration, MedReCoProcessor]:
    """The VLM and its processor: stage-1 vision encoder, projector, and a pretrained or preset LM.
    `data` (the mined tables) is needed only to learn a vocabulary (`tokenizer: mined`)."""
    quantization = _four_bit_config() if config.lora.quantization == "4bit" else None  # refuse early without CUDA
    tokenizer = build_tokenizer(config, data)
    vision_model = None
    if config.vision_model:
        if not (Path(config.vision_model) / "config.json").exists():
            raise FileNotFoundError(f"{config.vision_model}: stage-1 model not found (train stage 1 first)")
        vision_model = MedReCoModel.from_pretrained(config.vision_model)
        image_processor = MedReCoImageProcessor.from_pretrained(
            config.vision_model, tensor_cache_dir=config.data.tensor_cache_dir
        )
    else:
        image_processor = MedReCoImageProcessor(
            recipes=config.data.recipes, tensor_cache_dir=config.data.tensor_cache_dir
        )
    fields = dict(config.model.overrides)
    if config.blind_images:
        fields["blind_images"] = True
    if vision_model is not None:
        fields["vision_config"] = vision_model.config.vision_config.to_dict()
    entity_table = None
    if config.entity_tokens:
        if vision_model is None:
            raise RecipeError("stage2: entity_tokens needs the stage-1 model (set vision_model)")
        entity_table = stage1_entity_table(vision_model, config.vision_model)
        fields.update(
            entity_tokens=True,
            entity_vocabulary=list(entity_table),
            conditioner_config=vision_model.config.conditioner_config.to_dict(),
            conditioner_token_source=vision_model.config.conditioner_token_source,
        )
    preset_vlm = preset_fields(config.model.preset, "vlm")
    patch = (fields.get("vision_config") or preset_vlm.get("vision_config", {})).get("patch_size", 20)
    processor = MedReCoProcessor(
        image_processor, tokenizer, patch_size=patch, entity_vocabulary=fields.get("entity_vocabulary")
    )
    if config.language_model is None:
        # a preset LM with any fields the recipe overrides, sized to the tokenizer's vocabulary
        preset_text = preset_vlm.get("text_config", {})
        fields["text_config"] = {**preset_text, **fields.get("text_config", {}), "vocab_size": len(tokenizer)}
    model = create_model(
        "vlm",
        config.model.preset,
        image_token_id=processor.image_token_id,
        freeze_vision_tower=config.freeze_vision_tower,
        **fields,
    )
    if config.language_model is not None:
        kwargs = {"quantization_config": quantization} if quantization is not None else {}
        model.load_language_model(config.language_model, vocab_size=len(tokenizer), **kwargs)
    if vision_model is not None:
        model.load_vision_tower(vision_model.vision_model)
    if entity_table is not None:
        model.load_conditioner(vision_model.conditioner, torch.stack(list(entity_table.values())))
    if config.model.init_from:
        model = MedReCoForConditionalGeneration.from_pretrained(config.model.init_from)
        if config.blind_images:  # the recipe's switch holds for a checkpoint saved seeing
            model.config.blind_images = True
    model.set_turn_tokens(processor.end_of_turn_id, tokenizer.pad_token_id)
    return model, processor


def stage1_entity_table(vision_model: MedReCoModel, folder: str | Path) -> dict[str, torch.Tensor]:
    """entity id -> the stage-1 text encoder's embedding of its prompt, for every ontology entity:
    the entity table of a VLM with entity tokens (the tokenizer is the one saved with stage 1)."""
    prompts = entity_prompts()
    ids = sorted(prompts)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    embeddings = vision_model.eval().encode_entity_texts([prompts[i] for i in ids], tokenizer)
    return dict(zip(ids, embeddings.float(), strict=True))


def _four_bit_config():
    if not torch.cuda.is_available():
        raise RecipeError(
            "stage2: lora.quantization=4bit (QLoRA) needs a CUDA GPU with bitsandbytes; this machine has none. "
            "Use lora.quantization=none (LoRA in full precision) on a CPU."
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise RecipeError('stage2: lora.quantization=4bit (QLoRA) needs bitsandbytes: pip install "medreco[qlora]"')
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def lora_config(config: Stage2Config):
    from peft import LoraConfig

    targets = "|".join(config.lora.target_modules)
    return LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=rf".*language_model.*\.({targets})",  # the LM only; the vision encoder stays frozen
        modules_to_save=["multi_modal_projector"],
        task_type="CAUSAL_LM",
    )


def _trainer_class():
    from trl import SFTTrainer

    class MedReCoSFTTrainer(SFTTrainer):
        """SFTTrainer with the projector's own learning rate and the dataset's (homogeneous) order kept."""

        projector_learning_rate: float = 1e-4

        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

        def create_accelerator_and_postprocess(self):
            super().create_accelerator_and_postprocess()
            if fsdp_requested() and not torch.cuda.is_available() and not self.is_deepspeed_enabled:
                use_fsdp_on_cpu(self.accelerator)  # as in the training loop
                self.is_fsdp_enabled = True

        def create_optimizer(self, *args, **kwargs):
            if self.optimizer is None:
                decay, no_decay, projector = [], [], []
                for name, parameter in self.model.named_parameters():
                    if not parameter.requires_grad:
                        continue
                    if "multi_modal_projector" in name:
                        projector.append(parameter)
                    elif parameter.ndim >= 2:
                        decay.append(parameter)
                    else:
                        no_decay.append(parameter)
                groups = [
                    {"params": decay, "weight_decay": self.args.weight_decay},
                    {"params": no_decay, "weight_decay": 0.0},
                    {"params": projector, "weight_decay": 0.0, "lr": self.projector_learning_rate},
                ]
                self.optimizer = torch.optim.AdamW(
                    [g for g in groups if g["params"]], lr=self.args.learning_rate, betas=(0.9, 0.999)
                )
            return self.optimizer

    return MedReCoSFTTrainer


class Stage2Trainer:
    def __init__(self, config: Stage2Config):
        self.config = config
        check_deepspeed_launch(config.run.deepspeed_config)
        refuse_train_transforms(config.data, "stage2")
        set_seed(config.run.seed)  # model initialisation included: a seed reproduces the run
        self.data = MinedData(config.data.mined_dir, config.data.modalities)
        self.model, self.processor = build_vlm(config, self.data)
        if config.remember_image_features:
            self.model.remember_frozen_features()

    def dataset(self):
        import datasets

        examples = vqa_examples(
            self.data,
            "train",
            self.config.include_open_ended,
            self.config.include_longitudinal,
            self.config.entity_tokens,
            self.config.longitudinal_repeats,
            self.config.open_ended_share,
            self.config.swapped_twin_share,
        )
        random.Random(self.config.run.seed).shuffle(examples)
        examples = examples[: self.config.data.max_train_samples or None]
        check_nonempty(examples, "training VQA samples", self.data.directory)
        epochs = max(1, round(self.config.optimization.epochs))
        ordered = self.curriculum() + homogeneous_order(examples, self.batch_size, epochs, self.config.run.seed)
        check_nonempty(ordered, "full batches of VQA samples", self.data.directory)
        return datasets.Dataset.from_list(ordered)

    def curriculum(self) -> list[dict]:
        """The first `curriculum_steps` optimiser steps' conversations: presence questions about one
        image (`presence_examples`) or one case of a pair (`case_presence_examples`), as
        `curriculum_questions` says, in modality-homogeneous batches (repeated when there are fewer
        than the steps need)."""
        steps = self.config.curriculum_steps
        if not steps:
            return []
        examples = curriculum_examples(self.data, "train", self.config)
        check_nonempty(examples, f"{self.config.curriculum_questions} presence questions", self.data.directory)
        wanted = steps * self.batch_size * self.config.optimization.gradient_accumulation_steps
        ordered: list[dict] = []
        epoch = 0
        while len(ordered) < wanted:
            ordered += homogeneous_order(examples, self.batch_size, 1, self.config.run.seed + 7919 * (epoch + 1))
            epoch += 1
            if epoch > 1000:
                raise TrainingDataError(f"{self.data.directory}: too few presence questions for one batch")
        return ordered[:wanted]

    @property
    def batch_size(self) -> int:
        modalities = {self.data.studies[s].modality for s in self.data.studies}
        volumetric = any(is_volumetric(m, self.processor.image_processor) for m in modalities)
        optimization = self.config.optimization
        return min(optimization.batch_size_2d, optimization.batch_size_3d) if volumetric else optimization.batch_size_2d

    def sft_config(self):
        from trl import SFTConfig

        optimization, run = self.config.optimization, self.config.run
        precision = resolve_mixed_precision(optimization.mixed_precision)
        return SFTConfig(
            output_dir=str(Path(run.output_dir) / "trainer"),
            per_device_train_batch_size=self.batch_size,
            gradient_accumulation_steps=optimization.gradient_accumulation_steps,
            num_train_epochs=1,  # the dataset already holds every epoch, in block order
            max_steps=optimization.max_steps or -1,
            learning_rate=optimization.learning_rate,
            weight_decay=optimization.weight_decay,
            lr_scheduler_type="cosine",
            warmup_steps=optimization.warmup_ratio,  # a ratio when < 1 (transformers 5)
            max_grad_norm=optimization.max_grad_norm,
            bf16=precision == "bf16",
            fp16=precision == "fp16",
            use_cpu=not torch.cuda.is_available(),
            activation_checkpointing=optimization.gradient_checkpointing,
            logging_steps=run.log_every,
            save_steps=run.save_every or 10**9,
            save_total_limit=run.keep_checkpoints,
            report_to=available_trackers(run.report_to) or "none",
            seed=run.seed,
            max_length=None,  # never cut image placeholders
            assistant_only_loss=True,
            remove_unused_columns=False,
            dataloader_drop_last=True,
            dataloader_num_workers=run.loader_workers,  # the collator in worker processes, same batches
            dataloader_pin_memory=torch.cuda.is_available(),
            disable_tqdm=not run.progress,
            deepspeed=self.deepspeed_config(),
        )

    def deepspeed_config(self) -> str | None:
        """The DeepSpeed JSON: the recipe's (`run.deepspeed_config`), else the one `accelerate launch`
        was given (the Trainer fills its "auto" batch sizes right only when it is named here)."""
        if self.config.run.deepspeed_config:
            return str(deepspeed_config_path(self.config.run.deepspeed_config))
        if deepspeed_requested():
            return os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE") or None
        return None

    def trainer(self, stop_after: int | None = None):
        trainer_class = _trainer_class()
        trainer_class.projector_learning_rate = self.config.projector_learning_rate
        peft_config = lora_config(self.config) if self.config.lora.enabled else None
        if self.config.lora.quantization == "4bit" and not self.config.lora.enabled:
            raise RecipeError("stage2: 4-bit quantization trains adapters only; set lora.enabled=true")
        trainer = trainer_class(
            model=self.model,
            args=self.sft_config(),
            train_dataset=self.dataset(),
            processing_class=self.processor,
            peft_config=peft_config,
        )
        if not self.config.run.progress:
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # quiet: losses go to the logs and trackers, not stdout
        if stop_after is not None:
            trainer.add_callback(_stop_after_callback(stop_after))
        return trainer

    def train(self, stop_after: int | None = None) -> dict:
        """Stage 2, then the final save. `stop_after` ends the run early after that many optimiser steps,
        as a kill would (the schedule is the recipe's; a checkpoint is written for the resume)."""
        out = Path(self.config.run.output_dir)
        keep_adapter = self.config.lora.enabled and self.config.lora.keep_adapter
        if keep_adapter and self.config.lora.quantization != "none":
            raise RecipeError("stage2: lora.keep_adapter needs full-precision base weights (lora.quantization=none)")
        checkpoint_dir = out / "trainer"  # the SFTConfig's output_dir
        resume = self.config.run.resume and any(checkpoint_dir.glob("checkpoint-*"))
        if keep_adapter and not (resume and (out / "base").exists()) and is_main_launch_process():
            # this run's base (an earlier base/ may hold another LM)
            self._save(out / "base", self.model, {"phase": "base: the VLM before stage 2 (adapter/ applies to it)"})
        trainer = self.trainer(stop_after)
        output = trainer.train(resume_from_checkpoint=True if resume else None)
        if self.config.remember_image_features:
            self.model.remember_frozen_features(False)  # the training images' features, no longer needed
        steps = trainer.state.global_step
        if steps == 0:
            raise TrainingDataError(
                f"{self.config.data.mined_dir}: stage 2 ran no step: fewer training conversations than one batch "
                f"per process ({self.batch_size}); lower optimization.batch_size_2d/3d or add data"
            )
        if stop_after is not None and steps < trainer.state.max_steps:
            return {"stage2": {"phase": "stage2", "steps": steps, "stopped_early": True}}
        share = parameter_share(trainer.model_wrapped)
        model = self._whole_trained_model(trainer)
        if keep_adapter and trainer.is_world_process_zero():

            def write_adapter(folder: Path) -> None:
                model.save_pretrained(folder)  # PEFT: adapter_config.json + adapter_model.safetensors
                self.processor.save_pretrained(folder)

            save_folder_atomically(out / "adapter", write_adapter)
        if self.config.lora.enabled:
            model = model.merge_and_unload()  # a plain MedReCo VLM that from_pretrained loads
        self.model = model
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        summary = {
            "phase": "stage2",
            "steps": trainer.state.global_step,
            "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "train_loss": output.training_loss,
            "seconds": output.metrics.get("train_runtime"),
            "lora": self.config.lora.enabled,
            "processes": trainer.accelerator.num_processes,
            "strategy": strategy_name(trainer.accelerator),
            "parameter_share": share,
        }
        if trainer.is_world_process_zero():
            self._save(out / "final", model, summary)
        return {"stage2": summary}

    def _whole_trained_model(self, trainer):
        """The trained model (a PEFT model with LoRA) whole on every rank: the trainer's own under
        DDP; under DeepSpeed/FSDP a fresh copy loaded with the weights gathered from every rank
        (fp32 masters), since merging an adapter or saving needs whole tensors. Collective."""
        if strategy_name(trainer.accelerator) in ("single", "ddp"):
            return trainer.model
        state = gathered_state_dict(trainer.accelerator, trainer.model_wrapped, everywhere=True)
        trained = trainer.accelerator.unwrap_model(trainer.model_wrapped)
        release_engine(trainer.model_wrapped)
        if not self.config.lora.enabled:
            return fresh_copy(trained, state)
        from peft import get_peft_model

        copy = get_peft_model(fresh_copy(trained.get_base_model(), None), lora_config(self.config))
        load_whole_state(copy, state)
        return copy

    def _save(self, folder: Path, model, summary: dict) -> None:
        """A Hub-ready VLM folder (model, processor, their code, card), swapped into place whole."""
        config = self.config

        def write(temporary: Path) -> None:
            model.save_pretrained(temporary)
            self.processor.save_pretrained(temporary)
            write_run_record(temporary, config, summary, "vlm")

        save_folder_atomically(folder, write)


def _stop_after_callback(steps: int):
    """A Trainer callback that saves a checkpoint and ends training after `steps` optimiser steps."""
    from transformers import TrainerCallback

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= steps:
                control.should_save = control.should_training_stop = True
            return control

    return StopAfter()


def train_stage2(config: Stage2Config, stop_after: int | None = None) -> dict:
    """Run a stage-2 recipe; see [`Stage2Trainer`]."""
    return Stage2Trainer(config).train(stop_after=stop_after)


__all__ = [
    "Stage2Trainer",
    "MINED_TOKENIZER",
    "build_tokenizer",
    "build_vlm",
    "case_presence_examples",
    "curriculum_examples",
    "stage1_entity_table",
    "conversation_texts",
    "closed_answer",
    "closed_prompt",
    "conversation",
    "homogeneous_order",
    "lora_config",
    "train_stage2",
    "closed_rows",
    "vocabulary_texts",
    "vqa_examples",
]
