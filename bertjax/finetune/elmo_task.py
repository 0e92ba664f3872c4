"""ELMo as a bertjax-finetune task (Peters et al. 2018, section 3.3): a frozen biLM's layers,
mixed by learned softmax weights, at the input (and optionally the output) of a task BiLSTM.

Each sentence is split into words as the biLM was trained (the workdir's word tokenizer;
whitespace for bilm-tf files), wrapped in <S> ... </S> and given as characters (and word
ids, when the biLM has a vocabulary). The learned mix weights go into eval_results.json.
"""

from typing import Any

import numpy as np

from bertjax.finetune.elmo import (
    FROZEN,
    ElmoTaskSettings,
    elmo_task_objective,
    mix_weights,
    with_pretrained_bilm,
)
from bertjax.finetune.pretrained import Pretrained
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.setup import Arrays, SetupError, TaskSetup, label_index
from bertjax.tokenizers.elmo_vocab import BOS, EOS, sentence_char_ids, tokenize

TASKS = {"classification": "classify", "pair_classification": "pair_classify",
         "regression": "pair_regress", "tagging": "tag"}


def encode_sentences(model: Pretrained, sentences: list[list[str]], length: int,
                     suffix: str = "") -> Arrays:
    """char_ids [N, T, C] (and token_ids [N, T]) of <S> words </S>, lengths [N]."""
    C, N = model.config.max_chars, len(sentences)
    arrays = {f"char_ids{suffix}": np.zeros((N, length, C), np.int32),
              f"lengths{suffix}": np.zeros((N,), np.int32)}
    words_ids = model.config.token_encoder == "word"
    if words_ids:
        arrays[f"token_ids{suffix}"] = np.zeros((N, length), np.int32)
    for n, words in enumerate(sentences):
        words = list(words[:length - 2])
        arrays[f"lengths{suffix}"][n] = len(words) + 2
        arrays[f"char_ids{suffix}"][n, :len(words) + 2] = sentence_char_ids(words, C)
        if words_ids:
            arrays[f"token_ids{suffix}"][n, :len(words) + 2] = model.tokenizer.token_ids(
                [BOS, *words, EOS])
    return arrays


def elmo_setup(recipe: Recipe, model: Pretrained, train: list, dev: list, eval_spec: str
               ) -> TaskSetup:
    """The TaskSetup of the ELMo task model for `recipe`."""
    if recipe.task not in TASKS:
        raise SetupError(f"finetune.task={recipe.task!r}: the ELMo task model does "
                         f"{', '.join(TASKS)}")
    if model.config.token_encoder == "word" and model.tokenizer is None:
        raise SetupError("a word-encoder biLM needs its vocabulary: pass its bertjax workdir as "
                         "--init")
    L, words = recipe.max_seq_length, (lambda text: tokenize(text, model.word_tokenizer))
    task = TASKS[recipe.task]
    if task == "tag":
        tags = label_index([t for ex in train for t in ex.tags],
                           [t for ex in dev for t in ex.tags], eval_spec)

        def encode(exs: list) -> Arrays:
            arrays = encode_sentences(model, [list(ex.tokens) for ex in exs], L)
            arrays["labels"] = np.zeros((len(exs), L), np.int32)
            arrays["label_weights"] = np.zeros((len(exs), L), np.float32)
            for n, ex in enumerate(exs):  # token k sits at position k + 1, after <S>
                k = min(len(ex.tags), L - 2)
                arrays["labels"][n, 1:k + 1] = [tags.index(t) for t in ex.tags[:k]]
                arrays["label_weights"][n, 1:k + 1] = 1.0
            return arrays

        def decode(logits: np.ndarray) -> tuple[list, dict]:
            best = logits.argmax(-1)
            return [[tags[best[n, k + 1]] if k < L - 2 else "O" for k in range(len(ex.tokens))]
                    for n, ex in enumerate(dev)], {}
        num_labels, golds = len(tags), [list(ex.tags) for ex in dev]
    else:
        names = None
        if task != "pair_regress":
            names = label_index([ex.label for ex in train], [ex.label for ex in dev], eval_spec)
        elif len(train[0].texts) == 1:
            task = "regress"

        def encode(exs: list) -> Arrays:
            arrays = encode_sentences(model, [words(ex.texts[0]) for ex in exs], L)
            if task.startswith("pair_"):
                arrays |= encode_sentences(model, [words(ex.texts[1]) for ex in exs], L, "_b")
            if names is None:
                arrays["label"] = np.array([ex.label for ex in exs], np.float32)
            else:
                arrays["label"] = np.array([names.index(ex.label) for ex in exs], np.int32)
            return arrays

        def decode(outputs: np.ndarray) -> tuple[list, dict]:
            if names is None:
                return outputs.astype(float).tolist(), {}
            return [names[i] for i in outputs.argmax(-1)], {}
        num_labels = 1 if names is None else len(names)
        golds = [ex.label if names is not None else float(ex.label) for ex in dev]
    settings = ElmoTaskSettings(placement=recipe.placement, top_layer_only=recipe.top_layer_only,
                                l2_coef=recipe.mix_l2, elmo_dropout=recipe.elmo_dropout,
                                hidden_size=recipe.lstm_size, dropout_rate=recipe.dropout)
    objective = elmo_task_objective(model.config, task, num_labels, settings)
    dev_arrays = encode(dev)
    dev_arrays = {k: v for k, v in dev_arrays.items() if not k.startswith("label")}

    def predict(params: Any, inputs: Arrays) -> Any:
        return objective.model.apply({"params": params}, inputs)

    return TaskSetup(objective, encode(train), dev_arrays, predict, decode, golds,
                     [ex.id for ex in dev], lambda p: with_pretrained_bilm(p, model.params),
                     frozen=FROZEN, report=lambda params: {"mix_weights": mix_weights(params)})
