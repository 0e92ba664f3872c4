"""A fine-tuning recipe: the family, the task type and the hyper-parameters (gin: `finetune`).

configs/finetune/*.gin hold the papers' recipes (tests/finetune/test_recipes.py compares each
with the papers' tables): BERT (lr 5e-5 / 4e-5 / 3e-5 / 2e-5, batch 32, 3 epochs, 10% warmup,
dropout 0.1), GPT (lr 6.25e-5, batch 32, 3 epochs, 0.2% warmup, lambda 0.5), ELMo (a frozen
biLM mixed into a task BiLSTM beside the task's word vectors, lambda 0.001 on the mix weights).
The task type names one of bertjax.finetune.tasks, the (family, approach) one of
bertjax.finetune.families; `bertjax.finetune.run` looks both up before it reads anything.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Recipe:
    """Everything `bertjax-finetune` needs besides --init, --train, --eval and --workdir."""

    family: str
    task: str
    approach: str = "fine_tune"  # or "features" (BERT section 5.3; ELMo is feature-based)
    learning_rate: float = 5e-5
    batch_size: int = 32
    epochs: float = 3.0
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-6  # google-research/bert's AdamWeightDecayOptimizer; GPT: 1e-8
    dropout: float = 0.1
    max_seq_length: int = 128
    # BERT fine-tuning: batches of rows of similar length, padded to at most this many lengths
    # (multiples of max(32, max_seq_length / length_buckets)); 1 pads every batch to
    # max_seq_length. Sets at most this many compiled shapes (see length_buckets.py).
    length_buckets: int = 4
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
    # GPT: the auxiliary LM loss weight lambda (L3 = L2 + lambda L1), and how a text pair
    # becomes sequences: "entailment" (a $ b) or "similarity" (both orders, added)
    lm_coef: float = 0.5
    pair_transformation: str = "entailment"
    # feature-based models: BERT's layer combination (Table 7), the BiLSTM width (and, for
    # ELMo's task BiLSTM, its layers; BERT's feature-based tagger has Table 7's two)
    features: str = "concat_last_four"
    lstm_size: int = 768
    lstm_layers: int = 1
    # BERT tagging: read each sentence with its document's neighbouring sentences around it
    # (untagged), as the paper's CoNLL results do (section 5.3)
    document_context: bool = False
    # BERT fine-tuning with a BiLSTM (lstm_size per direction) between encoder and head:
    # Table 5's "LTR & No NSP + BiLSTM"
    bilstm: bool = False
    # ELMo: L2 weight on the mix's s, mix placement, dropout on ELMo vectors, top layer only,
    # the width of the task's own word vectors x_k beside ELMo_k (0: ELMo alone)
    mix_l2: float = 0.001
    placement: str = "input"  # or "input_output"
    elmo_dropout: float = 0.5
    top_layer_only: bool = False
    word_embed_dim: int = 0

    def __post_init__(self) -> None:
        if self.placement not in ("input", "input_output"):
            raise ValueError(f"finetune.placement is {self.placement!r}: choose one of input, "
                             "input_output")
        for name in ("learning_rate", "batch_size", "epochs", "max_seq_length", "eval_every",
                     "length_buckets", "lstm_layers"):
            if not getattr(self, name) > 0:
                raise ValueError(f"finetune.{name} is {getattr(self, name)!r}: set it above 0")
        if self.eval_batch_size is not None and self.eval_batch_size < 1:
            raise ValueError(f"finetune.eval_batch_size is {self.eval_batch_size!r}: set it "
                             "above 0, or None for batch_size")
        for name in ("text_columns", "labels"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
