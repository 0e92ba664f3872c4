"""From a recipe, a pretrained model and labelled examples to what the training loop runs:
the objective, the encoded training and evaluation arrays, how to predict and how to turn
predictions back into labels, tags, spans or scores for the papers' metrics.

One builder per family; each task type a family does not support is one line naming those it
does (GPT: the paper's four input transformations; ELMo: the feature-based task model).
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from bertjax.data.arrays import ArraySource
from bertjax.data.length_buckets import LengthBuckets
from bertjax.finetune import bert_inputs
from bertjax.finetune import gpt as ft_gpt
from bertjax.finetune.bert import BertHead, bert_finetuning, with_pretrained_encoder
from bertjax.finetune.gpt_inputs import encode as gpt_encode
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.objectives.objective import Objective

Arrays = dict[str, np.ndarray]


@dataclasses.dataclass
class TaskSetup:
    """Everything a fine-tuning run needs once its data is encoded."""

    objective: Objective
    train: Arrays
    eval: Arrays  # model inputs of the evaluation examples
    predict: Callable[[Any, Arrays], Any]  # (params, inputs) -> model outputs (jittable)
    decode: Callable[[np.ndarray], tuple[list, dict]]  # outputs -> (predictions, extra)
    golds: list  # per evaluation example, comparable with the predictions
    ids: list[str]
    initial_params: Callable[[Any], Any]  # a fresh run's params -> with the pretrained model
    frozen: tuple[str, ...] = ()  # parameter subtrees not trained (feature-based models)
    report: Callable[[Any], dict] | None = None  # params -> extras for eval_results.json
    metric_options: dict = dataclasses.field(default_factory=dict)
    buckets: LengthBuckets | None = None  # batches cut to length buckets (BERT fine-tuning)
    token_outputs: bool = False  # predictions have a token axis (axis 1) to pad back
    labels: list[str] | None = None  # class or tag names, in the order of the head's outputs
    encode_inputs: Callable[[list], Arrays] | None = None  # examples -> model inputs (--predict)

    def source(self, seed: int) -> ArraySource:
        """The training examples as the loop's data source."""
        return ArraySource(self.train, seed=seed, buckets=self.buckets)


class SetupError(ValueError):
    """A recipe, model and data that cannot be combined; the message names the fix."""


def label_index(train_labels: Sequence[str], eval_labels: Sequence[str], eval_spec: str
                ) -> list[str]:
    """The sorted training labels; one line for an evaluation label never seen in training."""
    names = sorted(set(train_labels))
    unseen = sorted(set(eval_labels) - set(names))
    if unseen:
        raise SetupError(f"{eval_spec}: label {unseen[0]!r} never occurs in the training data "
                         f"(labels: {', '.join(names[:10])}): fix the file or "
                         "finetune.label_column")
    return names


def _check_length(recipe: Recipe, positions: int) -> None:
    if recipe.max_seq_length > positions:
        raise SetupError(f"finetune.max_seq_length={recipe.max_seq_length} exceeds the model's "
                         f"{positions} positions: set finetune.max_seq_length <= {positions}")


# ---------------------------------------------------------------- BERT


def _bert(recipe: Recipe, model: Pretrained, train: list, dev: list, eval_spec: str
          ) -> TaskSetup:
    config = model.config.replace(dropout_rate=recipe.dropout, remat=False)
    _check_length(recipe, config.max_position_embeddings)
    vocab, L, task = model.tokenizer, recipe.max_seq_length, recipe.task
    if task == "qa":
        from bertjax.finetune.qa_task import bert_qa_setup  # SQuAD windows and span decoding

        return bert_qa_setup(recipe, model, config, train, dev)
    labels, encode_inputs = None, None
    if task == "tagging":
        tags = label_index([t for ex in train for t in ex.tags], [t for ex in dev for t in ex.tags],
                           eval_spec)
        index = {t: i for i, t in enumerate(tags)}
        train_tags = [[index[t] for t in ex.tags] for ex in train]
        train_arrays, _ = bert_inputs.encode_tagged(vocab, [ex.tokens for ex in train],
                                                    train_tags, L)
        dev_arrays, firsts = bert_inputs.encode_tagged(vocab, [ex.tokens for ex in dev], None, L)
        kind, num_labels, golds, labels = "tag", len(tags), [list(ex.tags) for ex in dev], tags

        def decode(logits: np.ndarray) -> tuple[list, dict]:
            best = logits.argmax(-1)
            return [[tags[best[r, p]] if p >= 0 else "O" for p in first]
                    for r, first in enumerate(firsts)], {}
    elif task == "multiple_choice":
        encode = lambda exs: bert_inputs.encode_choices(  # noqa: E731
            vocab, [ex.context for ex in exs], [ex.endings for ex in exs], L)
        train_arrays, dev_arrays = encode(train), encode(dev)
        train_arrays["label"] = np.array([ex.label for ex in train], np.int32)
        kind, num_labels, golds = "choice", 1, [ex.label for ex in dev]
        decode = lambda logits: (logits.argmax(-1).tolist(), {})  # noqa: E731
    else:
        encode_inputs = lambda exs: bert_inputs.encode_texts(  # noqa: E731
            vocab, [ex.texts for ex in exs], L)
        train_arrays, dev_arrays = encode_inputs(train), encode_inputs(dev)
        if task == "regression":
            train_arrays["label"] = np.array([ex.label for ex in train], np.float32)
            kind, num_labels, golds = "regress", 1, [float(ex.label) for ex in dev]
            decode = lambda out: (out[:, 0].astype(float).tolist(), {})  # noqa: E731
        else:
            names = label_index([ex.label for ex in train], [ex.label for ex in dev], eval_spec)
            train_arrays["label"] = np.array([names.index(ex.label) for ex in train], np.int32)
            kind, num_labels, labels = "classify", len(names), names
            golds = [ex.label for ex in dev]
            decode = lambda out: ([names[i] for i in out.argmax(-1)], {})  # noqa: E731
    bilstm = recipe.lstm_size if recipe.bilstm else 0
    objective = bert_finetuning(config, kind, num_labels, _choices(dev_arrays), bilstm)
    head = BertHead(config, kind, num_labels, bilstm)

    def predict(params: Any, inputs: Arrays) -> Any:
        return head.apply({"params": params}, inputs["input_ids"], inputs["segment_ids"],
                          inputs["input_mask"])

    token_features = ("input_ids", "segment_ids", "input_mask") + (
        ("labels", "label_weights") if task == "tagging" else ())
    buckets = (LengthBuckets(token_features, L, recipe.length_buckets)
               if recipe.length_buckets > 1 else None)
    return TaskSetup(objective, train_arrays, dev_arrays, predict, decode, golds,
                     [ex.id for ex in dev], lambda p: with_pretrained_encoder(p, model.params),
                     buckets=buckets, token_outputs=task == "tagging", labels=labels,
                     encode_inputs=encode_inputs)


def _choices(arrays: Arrays) -> int:
    return arrays["input_ids"].shape[1] if arrays["input_ids"].ndim == 3 else 4


# ---------------------------------------------------------------- GPT

GPT_KINDS = {"classification": "classification", "pair_classification": "entailment",
             "regression": "similarity", "multiple_choice": "multiple_choice"}


def _gpt(recipe: Recipe, model: Pretrained, train: list, dev: list, eval_spec: str) -> TaskSetup:
    if recipe.task not in GPT_KINDS:
        raise SetupError(f"finetune.task={recipe.task!r}: GPT fine-tunes "
                         f"{', '.join(GPT_KINDS)} (the paper's input transformations)")
    _check_length(recipe, model.config.max_position_embeddings)
    kind, bpe = GPT_KINDS[recipe.task], model.tokenizer
    if recipe.task == "multiple_choice":
        fields = lambda ex: (bpe.encode(ex.context), [bpe.encode(e) for e in ex.endings])  # noqa
        targets = lambda exs: [float(ex.label) for ex in exs]  # noqa: E731
        num_classes, names = 1, None
    elif recipe.task == "regression":
        fields = lambda ex: tuple(bpe.encode(t) for t in ex.texts)  # noqa: E731
        targets = lambda exs: [float(ex.label) for ex in exs]  # noqa: E731
        num_classes, names = 1, None
    else:
        fields = lambda ex: tuple(bpe.encode(t) for t in ex.texts)  # noqa: E731
        names = label_index([ex.label for ex in train], [ex.label for ex in dev], eval_spec)
        targets = lambda exs: [float(names.index(ex.label)) for ex in exs]  # noqa: E731
        num_classes = len(names)
    ft = ft_gpt.FinetuneConfig(kind, num_classes, recipe.lm_coef, recipe.learning_rate,
                               recipe.batch_size, int(recipe.epochs), recipe.warmup_fraction,
                               recipe.weight_decay, recipe.dropout, recipe.max_seq_length,
                               recipe.seed)
    special = ft_gpt.special_tokens(model.config)
    encode = lambda exs: gpt_encode(kind, [fields(ex) for ex in exs], targets(exs),  # noqa
                                    special, recipe.max_seq_length)
    train_arrays, dev_arrays = encode(train), encode(dev)
    golds = [ex.label if recipe.task != "regression" else float(ex.label) for ex in dev]
    dev_arrays.pop("label")
    classifier = ft_gpt.GptClassifier(ft_gpt.extended_config(model.config), kind, ft.num_classes)

    def predict(params: Any, inputs: Arrays) -> Any:
        return classifier.apply({"params": params}, inputs["input_ids"], inputs["input_mask"],
                                True, False)[0]

    def decode(logits: np.ndarray) -> tuple[list, dict]:
        if names is not None:
            return [names[i] for i in logits.argmax(-1)], {}
        if recipe.task == "multiple_choice":
            return logits.argmax(-1).tolist(), {}
        return logits[:, 0].astype(float).tolist(), {}

    key = jax.random.fold_in(jax.random.key(recipe.seed), 1)
    initial = lambda p: {**p, "gpt": ft_gpt.with_special_tokens(model.params, key)}  # noqa: E731
    return TaskSetup(ft_gpt.gpt_finetuning(model.config, ft), train_arrays, dev_arrays, predict,
                     decode, golds, [ex.id for ex in dev], initial)


def setup_task(recipe: Recipe, model: Pretrained, train: list, dev: list, eval_spec: str
               ) -> TaskSetup:
    """The TaskSetup of `recipe` for `model` on the training and evaluation examples."""
    if recipe.family == "elmo":
        from bertjax.finetune.elmo_task import elmo_setup as build
    elif recipe.family == "bert" and recipe.approach == "features":
        from bertjax.finetune.features_task import bert_features_setup as build
    else:
        build = _bert if recipe.family == "bert" else _gpt
    setup = build(recipe, model, train, dev, eval_spec)
    if not recipe.pretrained:  # the papers' "no pretraining" rows: the fresh initialisation
        setup.initial_params = lambda params: params
    if recipe.task in ("classification", "pair_classification"):
        names = sorted({ex.label for ex in train})
        positive = "1" if "1" in names else names[-1]  # GLUE's F1 (MRPC, QQP): class 1
        setup.metric_options = ({"labels": names} if recipe.task == "classification"
                                else {"positive": positive})
    return setup
