"""A fine-tuning recipe: the family, the task type and the hyper-parameters (gin: `finetune`).

A recipe starts from its family's paper values, the `PAPER` of its family's recipe class below
(each registered as its family's "recipe", bertjax.training.families): the one source of
them, for the Python API (`Recipe("gpt", "classification")` is GPT's recipe) and for the gin
recipes in configs/finetune/, which bind only what a task changes (tests/finetune/
test_recipes.py compares both with the papers' tables):

    BERT  lr 5e-5 (the paper's grid: 5e-5 / 4e-5 / 3e-5 / 2e-5), batch 32, 3 epochs, dropout
          0.1 (section 4.1, A.3); from google-research/bert's run_classifier.py: its own
          AdamWeightDecay ("bert_adam": no bias correction, linear decay from step 0 under a
          10% warmup), weight decay 0.01 off LayerNorm and biases, epsilon 1e-6, 128 tokens
    GPT   lr 6.25e-5, batch 32, 3 epochs, warmup over 0.2% of training then linear decay,
          dropout 0.1 on the classifier, lambda 0.5, L2 0.01 (section 4.1); Adam epsilon 1e-8
          (openai/finetune-transformer-lm)
    ELMo  a frozen biLM mixed into a task BiLSTM of 256 beside 100-d task word vectors
          ([x_k; ELMo_k]), lambda 0.001 on the mix weights (sections 3.3, 5.1); Adam lr 1e-3,
          epsilon 1e-8, no weight decay (AllenNLP's configurations); batch 32, 10 epochs, 2%
          warmup, dropout 0.2 are this project's, the paper giving none

`TASK_DEFAULTS` holds where a paper's task recipe departs from its family's (SQuAD's
384-token windows, SWAG's lr 2e-5 at batch 16, ELMo's NER model).

The task type names one of bertjax.finetune.tasks, the (family, approach) one of
bertjax.finetune.families; `bertjax.finetune.run` looks both up before it reads anything.
"""

import dataclasses
import typing
from typing import Any, ClassVar

from bertjax.data.packing import check_per_row
from bertjax.finetune.heads.bert import check_pooling
from bertjax.training import families
from bertjax.training.optim import OPTIMIZERS

_TRANSFORMER = dict(approach="fine_tune", batch_size=32, epochs=3.0, weight_decay=0.01,
                    dropout=0.1, max_seq_length=128)
# (family, task type): where that paper's task recipe departs from its family's
TASK_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("bert", "qa"): dict(max_seq_length=384),  # run_squad.py's windows (SQuAD 1.1, 4.2)
    ("bert", "multiple_choice"): dict(learning_rate=2e-5, batch_size=16),  # SWAG, 4.4
    # the paper's NER model as AllenNLP configures it (training_config/ner_elmo.jsonnet)
    ("elmo", "tagging"): dict(lstm_size=200, lstm_layers=2, dropout=0.5, batch_size=64,
                              word_embed_dim=50, max_seq_length=128),
}


def paper_defaults(family: str, task: str) -> dict[str, Any]:
    """The settings a `family` recipe for `task` starts from (see the module docstring)."""
    return {**families.piece(family, "recipe").PAPER, **TASK_DEFAULTS.get((family, task), {})}


def _validate(recipe: "Recipe") -> None:
    """The recipe's settings are ones its family can run; one line naming the setting."""
    if recipe.optimizer not in OPTIMIZERS:
        raise ValueError(f"finetune.optimizer is {recipe.optimizer!r}: choose one of "
                         f"{', '.join(OPTIMIZERS)}")
    positive = ("learning_rate", "batch_size", "epochs", "max_seq_length", "eval_every",
                "length_buckets", "lstm_layers")
    for name in positive:
        if hasattr(recipe, name) and not getattr(recipe, name) > 0:
            raise ValueError(f"finetune.{name} is {getattr(recipe, name)!r}: set it above 0")
    if recipe.eval_batch_size is not None and recipe.eval_batch_size < 1:
        raise ValueError(f"finetune.eval_batch_size is {recipe.eval_batch_size!r}: set it "
                         "above 0, or None for batch_size")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Everything `bertjax-finetune` needs besides --init, --train, --eval and --workdir: the
    settings of every family. `Recipe(family, task, **settings)` builds the family's own
    recipe (BertRecipe, GptRecipe, ElmoRecipe), which adds that family's settings; a setting
    of another family is refused in one line."""

    # the settings a recipe of the family starts from (None in a field below: this)
    PAPER: ClassVar[dict[str, Any]] = {}

    family: str
    task: str
    # "fine_tune", or "features" (BERT section 5.3; ELMo's only approach); None: the family's
    approach: str | None = None
    # None in the fields below: the paper's value for the family and task (paper_defaults)
    learning_rate: float | None = None
    batch_size: int | None = None
    epochs: float | None = None
    warmup_fraction: float | None = None
    weight_decay: float | None = None
    adam_epsilon: float | None = None
    optimizer: str | None = None  # "adamw", "bert_adam" (google-research/bert's) or "lamb"
    dropout: float | None = None
    max_seq_length: int | None = None
    eval_every: int = 500  # steps; the run is also evaluated at its end
    eval_batch_size: int | None = None  # rows per prediction batch (None: batch_size)
    seed: int = 0
    # False: --init gives only the architecture and tokenizer; the weights stay randomly
    # initialised (GPT's "Transformer w/o pre-training" ablation, Radford et al. Table 5)
    pretrained: bool = True
    # input columns of TSV/CSV/JSONL files (None: detected from the header)
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None
    # the classes in the task's own numbering, class i at output i (None: the dataset's, as
    # TFDS numbers them, else the training labels sorted); what an export's id2label says
    labels: tuple[str, ...] | None = None
    # the class whose F1 a two-class pair task reports (None: class 1 of a numbered dataset,
    # GLUE's: MRPC equivalent, QQP duplicate; no F1 for names without a numbering)
    positive_label: str | None = None
    # the dev metric that keeps the best checkpoint (None: the task type's first; GLUE
    # ranks CoLA by mcc, MRPC and QQP by f1, and bertjax-glue sets it so)
    main_metric: str | None = None
    # extractive QA
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30

    def __new__(cls, *args: Any, **settings: Any) -> "Recipe":
        if cls is not Recipe:  # a family's recipe (dataclasses.replace, pickling)
            return super().__new__(cls)
        family = args[0] if args else settings.get("family")
        recipes = families.pieces("recipe")
        if family not in recipes:
            raise ValueError(f"finetune.family is {family!r}: choose one of "
                             f"{', '.join(recipes)}")
        own = {f.name for f in dataclasses.fields(recipes[family])}
        for name in settings:
            if name not in own:
                owners = [f for f, c in recipes.items()
                          if name in {x.name for x in dataclasses.fields(c)}]
                where = (f"a {' and '.join(o.upper() for o in owners)} setting" if owners
                         else "no recipe's setting")
                raise ValueError(f"finetune.{name} is {where}; this recipe fine-tunes "
                                 f"{family.upper()}: drop it, or choose a recipe of that family")
        return super().__new__(recipes[family])

    def __post_init__(self) -> None:
        for name, value in paper_defaults(self.family, self.task).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name in ("text_columns", "labels"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _validate(self)


SHORTEST_EXAMPLE = 2  # tokens of BERT's shortest encoded example: [CLS] [SEP] of an empty text


@families.provides("bert", "recipe")
@dataclasses.dataclass(frozen=True)
class BertRecipe(Recipe):
    """BERT's own settings (section 4; Table 5's BiLSTM; Table 7's features)."""

    PAPER: ClassVar[dict[str, Any]] = dict(
        _TRANSFORMER, learning_rate=5e-5, warmup_fraction=0.1, adam_epsilon=1e-6,
        optimizer="bert_adam", lstm_size=768, lstm_layers=1)

    # batches of rows of similar length, padded to at most this many lengths (multiples of
    # max(32, max_seq_length / length_buckets)); 1 pads every batch to max_seq_length. Sets at
    # most this many compiled shapes (see length_buckets.py).
    length_buckets: int = 4
    # sentence and pair classification and regression: training rows packed with up to this
    # many examples each (bertjax/finetune/packed.py); 0 trains one example per row.
    # batch_size stays the examples a step trains on (on average).
    packed_sequences: int = 0
    # tagging: read each sentence with its document's neighbouring sentences around it
    # (untagged), as the paper's CoNLL results do (section 5.3)
    document_context: bool = False
    # a BiLSTM (lstm_size per direction) between encoder and head: Table 5's "LTR & No NSP +
    # BiLSTM"; the feature-based tagger's layer combination and BiLSTM (Table 7, two layers)
    bilstm: bool = False
    features: str = "concat_last_four"
    lstm_size: int | None = None
    lstm_layers: int | None = None
    # what the sentence heads (classify, regress, choice) read: "cls", the pooled [CLS] (the
    # paper's); "mean", the mean of the final hidden states over the real tokens (heads/bert.py
    # says why). task.json records it; the tagging and QA heads refuse "mean".
    pooling: str = "cls"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_pooling(self.pooling)
        if self.packed_sequences < 0 or self.packed_sequences == 1:
            raise ValueError(f"finetune.packed_sequences is {self.packed_sequences!r}: set 0 (one "
                             "example per row) or the most examples a row holds (2+)")
        check_per_row("finetune.packed_sequences", self.packed_sequences, self.max_seq_length,
                      SHORTEST_EXAMPLE, "examples (each at least [CLS] [SEP])")


@families.provides("gpt", "recipe")
@dataclasses.dataclass(frozen=True)
class GptRecipe(Recipe):
    """GPT's own settings (section 3.2 and 3.3)."""

    PAPER: ClassVar[dict[str, Any]] = dict(
        _TRANSFORMER, learning_rate=6.25e-5, warmup_fraction=0.002, adam_epsilon=1e-8,
        optimizer="adamw")

    # the auxiliary LM loss weight lambda (L3 = L2 + lambda L1), and how a text pair becomes
    # sequences: "entailment" (a $ b) or "similarity" (both orders, added)
    lm_coef: float = 0.5
    pair_transformation: str = "entailment"


@families.provides("elmo", "recipe")
@dataclasses.dataclass(frozen=True)
class ElmoRecipe(Recipe):
    """ELMo's own settings: the task model around the frozen biLM (sections 3.3, 5.1, 5.2)."""

    PAPER: ClassVar[dict[str, Any]] = dict(
        approach="features", learning_rate=1e-3, batch_size=32, epochs=10.0,
        warmup_fraction=0.02, weight_decay=0.0, adam_epsilon=1e-8, optimizer="adamw",
        dropout=0.2, max_seq_length=64, lstm_size=256, lstm_layers=1, word_embed_dim=100)

    # the task BiLSTM's width per direction and layers
    lstm_size: int | None = None
    lstm_layers: int | None = None
    # how often training reads a word as the unknown word, so that row of x is trained (this
    # project's value; every training word is in the task vocabulary), the L2 weight on the
    # mix's s, the mix placement, dropout on ELMo vectors, top layer only, and the width of
    # the task's own word vectors x_k beside ELMo_k (0: ELMo alone)
    word_dropout: float = 0.05
    mix_l2: float = 0.001
    placement: str = "input"  # or "input_output"
    elmo_dropout: float = 0.5
    top_layer_only: bool = False
    word_embed_dim: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.placement not in ("input", "input_output"):
            raise ValueError(f"finetune.placement is {self.placement!r}: choose one of input, "
                             "input_output")
        if not 0 <= self.word_dropout < 1:
            raise ValueError(f"finetune.word_dropout is {self.word_dropout!r}: choose a "
                             "probability in [0, 1)")


def setting_types() -> dict[str, Any]:
    """{setting: its type} of every family's recipe: what gin checks the values that
    `finetune`'s **settings receive against (bertjax.cli.gin_utils.check_types)."""
    found: dict[str, Any] = {}
    for recipe in families.pieces("recipe").values():
        hints = typing.get_type_hints(recipe)
        found.update((f.name, hints[f.name]) for f in dataclasses.fields(recipe))
    return found


def finetune(family: str, task: str, **settings: Any) -> Recipe:
    """gin's `finetune`: the family's recipe for `task` with `settings` (bertjax-finetune's
    recipes, configs/finetune/*.gin)."""
    return Recipe(family, task, **settings)
