"""ELMo as features (Peters et al. 2018, section 3.3): a frozen biLM's layers, mixed by learned
softmax weights, at the input (and optionally the output) of a task BiLSTM
(bertjax.finetune.heads.elmo), beside the task's own context-independent word vectors
([x_k; ELMo_k], finetune.word_embed_dim).

Each sentence is split into words as the biLM was trained (the workdir's word tokenizer, or
the one bertjax's export wrote into options.json; whitespace for bilm-tf's own files), wrapped
in <S> ... </S> and given to the biLM as characters (and word ids, when the biLM has a
vocabulary); the task model strips <S> and </S> from the biLM's layers, so a tagged
sentence's word k (its k-th token, from 0) is predicted at position k. The task's word
vocabulary is every word of the training examples (id 0 pads, 1 is any word
training never saw, trained by finetune.word_dropout). The learned mix weights go into
eval_results.json.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from bertjax.finetune import truncation
from bertjax.finetune.adapter import Adapter, Arrays, SetupError, register
from bertjax.finetune.examples import Example
from bertjax.finetune.heads.elmo import (
    FROZEN,
    UNKNOWN_WORD,
    ElmoTaskSettings,
    elmo_task_objective,
    mix_weights,
    with_pretrained_bilm,
)
from bertjax.finetune.outputs import CLASSES, SCORE, WORD_CLASSES, Layout
from bertjax.finetune.task import TEXTS, WORDS, Task
from bertjax.tokenizers.elmo_vocab import BOS, EOS, sentence_char_ids, tokenize
from bertjax.typing import Params

if TYPE_CHECKING:
    from bertjax.finetune.pretrained import Pretrained
    from bertjax.finetune.recipe import ElmoRecipe

PAD_WORD = 0


def encode_sentences(model: Pretrained, sentences: Sequence[Sequence[str]], length: int,
                     words: dict[str, int] | None = None, suffix: str = "") -> Arrays:
    """char_ids [N, T, C] (and token_ids [N, T] for a word biLM) of <S> words </S>, lengths
    [N] (words + 2), and word_ids [N, T] of the words alone in the task vocabulary `words`
    (word k at k, where the task model reads it once the boundaries are stripped)."""
    C, N = model.config.max_chars, len(sentences)
    arrays = {f"char_ids{suffix}": np.zeros((N, length, C), np.int32),
              f"lengths{suffix}": np.zeros((N,), np.int32)}
    bilm_words = model.config.token_encoder == "word"
    if bilm_words:
        arrays[f"token_ids{suffix}"] = np.zeros((N, length), np.int32)
    if words is not None:
        arrays[f"word_ids{suffix}"] = np.zeros((N, length), np.int32)
    for n, sentence in enumerate(sentences):
        kept = list(sentence[:length - 2])
        truncation.note(len(sentence) > length - 2)
        arrays[f"lengths{suffix}"][n] = len(kept) + 2
        arrays[f"char_ids{suffix}"][n, :len(kept) + 2] = sentence_char_ids(kept, C)
        if bilm_words:
            arrays[f"token_ids{suffix}"][n, :len(kept) + 2] = model.tokenizer.token_ids(
                [BOS, *kept, EOS])
        if words is not None:
            arrays[f"word_ids{suffix}"][n, :len(kept)] = [
                words.get(w, UNKNOWN_WORD) for w in kept]
    return arrays


def word_index(sentences: Iterable[Sequence[str]]) -> dict[str, int]:
    """The task vocabulary: every word, in order of first occurrence, from id 2 on."""
    index: dict[str, int] = {}
    for sentence in sentences:
        for word in sentence:
            index.setdefault(word, len(index) + 2)
    return index


@register
class ElmoFeatures(Adapter):
    """The frozen biLM's mix into a task BiLSTM (finetune.lstm_size per direction), max-pooled
    for (pair) classification and regression, per token for tagging."""

    family, approach = "elmo", "features"
    inputs = (TEXTS, WORDS)
    outputs = (CLASSES.name, SCORE.name, WORD_CLASSES.name)
    frozen = FROZEN
    recipe: ElmoRecipe

    def __init__(self, recipe: ElmoRecipe, model: Pretrained, task: Task, num_outputs: int,
                 examples: Sequence[Example]):
        super().__init__(recipe, model, task, num_outputs, examples)
        if model.config.token_encoder == "word" and model.tokenizer is None:
            raise SetupError("a word-encoder biLM needs its vocabulary: pass its bertjax "
                             "workdir as --init")
        texts = self._sentences(examples)
        self.pair = len(texts) == 2  # the training examples': two sentences, or one
        self.words = (word_index(s for sentences in texts for s in sentences)
                      if recipe.word_embed_dim else None)
        r = recipe
        settings = ElmoTaskSettings(
            placement=r.placement, top_layer_only=r.top_layer_only, l2_coef=r.mix_l2,
            elmo_dropout=r.elmo_dropout, hidden_size=r.lstm_size, num_layers=r.lstm_layers,
            dropout_rate=r.dropout, word_embed_dim=r.word_embed_dim, word_dropout=r.word_dropout,
            word_vocab_size=len(self.words) + 2 if self.words is not None else 0)
        self.objective = elmo_task_objective(model.config, task.output, num_outputs, settings,
                                             self.pair)

    def _sentences(self, examples: Sequence[Example]) -> list[list[list[str]]]:
        """Per text of the examples (one or two), each example's words."""
        if self.task.inputs == WORDS:
            return [[list(ex.tokens) for ex in examples]]
        split = lambda text: tokenize(text, self.model.word_tokenizer)  # noqa: E731
        return [[split(ex.texts[i]) for ex in examples] for i in range(len(examples[0].texts))]

    def encode_inputs(self, examples: Sequence[Example], targets: list | None
                      ) -> tuple[Arrays, Layout]:
        texts = self._sentences(examples)
        if (len(texts) == 2) != self.pair:
            raise SetupError(f"the training examples have another number of texts than these "
                             f"({len(texts)}): give every file the same columns")
        length = self.recipe.max_seq_length
        arrays: Arrays = {}
        for sentences, suffix in zip(texts, ("", "_b"), strict=False):
            arrays |= encode_sentences(self.model, sentences, length, self.words, suffix)
        if self.task.inputs != WORDS:
            return arrays, None
        return arrays, [[k if k < length - 2 else -1 for k in range(len(words))]
                        for words in texts[0]]

    def seq_length(self, train: Arrays) -> int:
        return self.recipe.max_seq_length  # every sentence is padded to it

    def predict(self, params: Params, inputs: Arrays) -> jax.Array:
        return self.objective.model.apply({"params": params}, inputs)

    def initial_params(self, params: Params) -> Params:
        return with_pretrained_bilm(params, self.model.params)

    def report(self, params: Params) -> dict[str, Any]:
        return {"mix_weights": mix_weights(params)}

