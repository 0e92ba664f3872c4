"""The papers' ablations as declared sweeps for `scripts/sweep.py --preset=NAME`, at tiny scale.

A preset is a pretraining experiment and a fine-tuning recipe (gin files) with arguments shared
by every point, and per point what changes: its own experiment file, if any, and extra bertjax-
train (`pretrain`) and bertjax-finetune (`finetune`) arguments. Each point pretrains, then fine-
tunes with `--init` = that pretraining workdir, on the downstream task (AG News by default).
Points with the same pretraining arguments share one pretraining run. Every size, step count and
learning rate here is tiny, so that a whole preset runs on a laptop CPU in minutes: the numbers
show that the machinery works and which way an ablation leans at that scale, not the papers'
results. For paper scale, swap in the papers' experiments (configs/experiments/*_tpu_*.gin) and
recipes.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Point:
    """One row of an ablation table: its name and what it changes."""

    name: str
    experiment: str | None = None  # instead of the preset's
    pretrain: tuple[str, ...] = ()  # extra bertjax-train arguments
    finetune: tuple[str, ...] = ()  # extra bertjax-finetune arguments


@dataclasses.dataclass(frozen=True)
class Preset:
    """A paper's ablation: shared pretraining and fine-tuning arguments, and its points."""

    title: str
    experiment: str  # bertjax-train --gin_file
    pretrain: tuple[str, ...]
    recipe: str  # bertjax-finetune --gin_file
    finetune: tuple[str, ...]
    points: tuple[Point, ...]


# Tiny scale, shared by the presets: a few hundred steps on the stdlib corpus, one epoch of
# AG News (4,000 sentences) at length 64 with a learning rate that suits tiny models.
STEPS = ("--gin.NUM_STEPS=200",)
FINETUNE = ("--gin.finetune.epochs=1.0", "--gin.finetune.max_seq_length=64",
            "--gin.finetune.learning_rate=5e-4", "--gin.finetune.eval_every=25")
BERT = ("configs/experiments/bert_tiny_cpu.gin", STEPS,
        "configs/finetune/bert_classification.gin", FINETUNE)
LTR = "configs/experiments/bert_ltr_tiny_cpu.gin"


def bert_size(layers: int, hidden: int, heads: int) -> Point:
    """A Table 6 point: BERT with L layers, H hidden units, A heads (mlp 4H)."""
    return Point(f"L={layers},H={hidden},A={heads}", pretrain=(
        f"--gin.bert_config.num_layers={layers}", f"--gin.bert_config.hidden_size={hidden}",
        f"--gin.bert_config.num_heads={heads}", f"--gin.bert_config.mlp_dim={4 * hidden}"))


PRESETS: dict[str, Preset] = {
    "bert_table5": Preset(
        "BERT (Devlin et al. 2018) Table 5: pretraining tasks",
        *BERT,
        (
            Point("mlm_nsp"),
            Point("no_nsp", pretrain=("--gin.NSP=False",)),
            Point("ltr_no_nsp", experiment=LTR),
            Point("ltr_no_nsp_bilstm", experiment=LTR,
                  finetune=("--gin.finetune.bilstm=True", "--gin.finetune.lstm_size=128")),
        ),
    ),
    "bert_table6": Preset(
        "BERT (Devlin et al. 2018) Table 6: model size vs MLM perplexity and accuracy",
        *BERT,
        (bert_size(1, 64, 2), bert_size(2, 128, 2), bert_size(4, 128, 4), bert_size(4, 256, 4)),
    ),
    "gpt_table5": Preset(
        "GPT (Radford et al. 2018) Table 5: auxiliary LM loss and pretraining",
        "configs/experiments/gpt_tiny_cpu.gin", STEPS,
        "configs/finetune/gpt_classification.gin", FINETUNE,
        (
            Point("transformer_aux_lm"),  # lambda = 0.5
            Point("no_aux_lm", finetune=("--gin.finetune.lm_coef=0.0",)),
            Point("no_pretraining", finetune=("--gin.finetune.pretrained=False",)),
        ),
    ),
    "elmo_table2": Preset(
        "ELMo (Peters et al. 2018) Table 2: lambda and which biLM layers",
        "configs/experiments/elmo_tiny_cpu.gin", STEPS,
        "configs/finetune/elmo_classification.gin",
        ("--gin.finetune.epochs=1.0", "--gin.finetune.max_seq_length=48",
         "--gin.finetune.lstm_size=64", "--gin.finetune.eval_every=25"),
        (
            Point("last_only", finetune=("--gin.finetune.top_layer_only=True",)),
            Point("all_lambda_1", finetune=("--gin.finetune.mix_l2=1.0",)),
            Point("all_lambda_0.001", finetune=("--gin.finetune.mix_l2=0.001",)),
        ),
    ),
}
