"""A fine-tuning recipe: the family, the task type and the hyper-parameters (gin: `finetune`).

configs/finetune/*.gin hold the papers' recipes: BERT (lr 5e-5 / 3e-5 / 2e-5, batch 32, 3
epochs, 10% warmup, dropout 0.1), GPT (lr 6.25e-5, batch 32, 3 epochs, 0.2% warmup, lambda
0.5), ELMo (a frozen biLM mixed into a BiLSTM task model, lambda 0.001 on the mix weights).
"""

import dataclasses

FAMILIES = ("bert", "gpt", "elmo")
TASKS = ("classification", "pair_classification", "regression", "tagging", "qa",
         "multiple_choice")
APPROACHES = ("fine_tune", "features")  # BERT's two (paper section 5.3); ELMo is features


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Everything `bertjax-finetune` needs besides --init, --train, --eval and --workdir."""

    family: str
    task: str
    approach: str = "fine_tune"
    learning_rate: float = 5e-5
    batch_size: int = 32
    epochs: float = 3.0
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    max_seq_length: int = 128
    # BERT fine-tuning: batches of rows of similar length, padded to at most this many lengths
    # (multiples of max(32, max_seq_length / length_buckets)); 1 pads every batch to
    # max_seq_length. Sets at most this many compiled shapes (see data/length_buckets.py).
    length_buckets: int = 4
    eval_every: int = 500  # steps; the run is also evaluated at its end
    seed: int = 0
    # False: --init gives only the architecture and tokenizer; the weights stay randomly
    # initialised (GPT's "Transformer w/o pre-training" ablation, Radford et al. Table 5)
    pretrained: bool = True
    # input columns of TSV/CSV/JSONL files (None: detected from the header)
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None
    # extractive QA
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    # GPT: the auxiliary LM loss weight lambda (L3 = L2 + lambda L1)
    lm_coef: float = 0.5
    # feature-based models: BERT's layer combination (Table 7), the BiLSTM width
    features: str = "concat_last_four"
    lstm_size: int = 768
    # BERT fine-tuning with a BiLSTM (lstm_size per direction) between encoder and head:
    # Table 5's "LTR & No NSP + BiLSTM"
    bilstm: bool = False
    # ELMo: L2 weight on the mix's s, mix placement, dropout on ELMo vectors, top layer only
    mix_l2: float = 0.001
    placement: str = "input"  # or "input_output"
    elmo_dropout: float = 0.5
    top_layer_only: bool = False

    def __post_init__(self) -> None:
        for name, value, allowed in (("family", self.family, FAMILIES),
                                     ("task", self.task, TASKS),
                                     ("approach", self.approach, APPROACHES),
                                     ("placement", self.placement, ("input", "input_output"))):
            if value not in allowed:
                raise ValueError(f"finetune.{name} is {value!r}: choose one of "
                                 f"{', '.join(allowed)}")
        for name in ("learning_rate", "batch_size", "epochs", "max_seq_length", "eval_every",
                     "length_buckets"):
            if not getattr(self, name) > 0:
                raise ValueError(f"finetune.{name} is {getattr(self, name)!r}: set it above 0")
        if self.text_columns is not None:
            object.__setattr__(self, "text_columns", tuple(self.text_columns))
