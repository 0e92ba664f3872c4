"""What a pretrained BERT has learned, in a form a person recognises: fill in masked words, and
measure masked-LM accuracy on text the model never saw, next to the unigram baseline.

    filler = MaskFiller.from_workdir("workdir/bert_tiny_demo")
    filler.fill("The [MASK] module provides functions for regular expressions .")
        -> [[("re", 0.31), ("string", 0.08), ("os", 0.05)]]      # top-k per [MASK]
    baseline = filler.unigram_baseline()        # the most frequent token of the training text
    filler.held_out_score("stdlib:held_out", baseline.token_id)  # accuracy, and the baseline's

The unigram baseline always guesses the training text's most frequent token (WordPiece tokens
of the corpus the run recorded, with this model's vocabulary). A model that has learned nothing
about context scores about that; the score reports both on the same blanks, overall and at the
blanks shown to the model as [MASK] (the other 20% keep their token or get a random one, and a
model can learn to copy the kept ones).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import pathlib
import tempfile
from collections.abc import Callable, Iterable, Iterator

import flax.linen as nn
import jax
import numpy as np

from bertjax.convert.hf_bert import param_template
from bertjax.data import corpora
from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.source import load_documents
from bertjax.layers.embeddings import vocabulary_logits
from bertjax.models.bert import BertConfig, BertForPreTraining
from bertjax.tokenizers.wordpiece import MASK, WordPieceVocabulary
from bertjax.training import workdir as workdir_lib
from bertjax.training.checkpoint import load_trained
from bertjax.typing import Params

BASELINE_TOKENS = 2_000_000  # the unigram baseline counts at most this many training tokens


@dataclasses.dataclass(frozen=True)
class UnigramBaseline:
    """The most frequent token of a run's training text: the guess of a model without context."""

    token_id: int
    token: str
    counted: int  # training tokens counted
    corpus: str


@dataclasses.dataclass(frozen=True)
class HeldOutScore:
    """Masked-LM accuracy on held-out blanks, and the unigram baseline's on the same blanks."""

    accuracy: float  # every masked position (80% [MASK], 10% random, 10% kept)
    count: int
    mask_accuracy: float  # the positions whose input is [MASK]
    mask_count: int
    baseline: float | None = None  # always guessing the baseline token, same positions
    mask_baseline: float | None = None


def training_documents(corpus: str) -> Iterator[list[str]]:
    """The documents of a corpus setting, lazily for TFDS corpora (which can be large)."""
    if corpus.startswith("tfds:"):
        name, _, split = corpus[len("tfds:"):].partition(":")
        return corpora.tfds_documents(name, split or "train")
    return iter(load_documents(corpus))


def count_tokens(encode: Callable[[str], list[int]], documents: Iterable[list[str]],
                 limit: int) -> collections.Counter:
    """Token-id counts of the documents' sentences, up to about `limit` tokens."""
    counts: collections.Counter = collections.Counter()
    total = 0
    for document in documents:
        for sentence in document:
            ids = encode(sentence)
            counts.update(ids)
            total += len(ids)
        if total >= limit:
            break
    return counts


@dataclasses.dataclass
class MaskFiller:
    """A BERT with its MLM head and its WordPiece vocabulary."""

    config: BertConfig
    params: Params
    vocab: WordPieceVocabulary
    source: pathlib.Path | None = None  # the workdir, whose vocabulary held-out text uses
    train_corpus: str | None = None  # the corpus setting the run recorded it trained on

    def __post_init__(self) -> None:
        model = BertForPreTraining(self.config)
        size = self.vocab.vocab_size  # the table's rows past it are never predicted

        def mlm_logits(params: Params, ids: jax.Array, segments: jax.Array, mask: jax.Array,
                       positions: jax.Array) -> jax.Array:
            logits = model.apply({"params": params}, ids, segments, mask, positions)
            return vocabulary_logits(logits["mlm_logits"].astype("float32"), size)

        def mlm_probs(params: Params, ids: jax.Array, segments: jax.Array, mask: jax.Array,
                      positions: jax.Array) -> jax.Array:
            return jax.nn.softmax(mlm_logits(params, ids, segments, mask, positions), axis=-1)

        def mlm_guesses(params: Params, batch: dict[str, jax.Array]) -> jax.Array:
            return mlm_logits(params, batch["input_ids"], batch["segment_ids"],
                              batch["input_mask"], batch["masked_lm_positions"]).argmax(-1)

        self._probs = jax.jit(mlm_probs)
        self._guesses = jax.jit(mlm_guesses)

    @classmethod
    def from_workdir(cls, path: str | pathlib.Path) -> MaskFiller:
        """The newest readable checkpoint of a BERT pretraining workdir."""
        trained = load_trained(path, "bert", "bertjax-fill-mask",
                               lambda config: nn.unbox(param_template(config, heads=True)),
                               remat=False)
        tokenizer = trained.record["tokenizer"]
        vocab = WordPieceVocabulary(workdir_lib.tokenizer_file(trained.workdir, trained.record,
                                                               "vocab"),
                                    lower_case=tokenizer.get("lower_case", True))
        corpus = trained.record.get("data", {}).get("corpus")
        return cls(trained.config, trained.params, vocab, trained.workdir, corpus)

    def _ids(self, text: str) -> list[int]:
        """[CLS] `text` [SEP] as ids, each [MASK] of `text` one [MASK] id."""
        pieces = [vocab_ids for part in text.split(MASK) for vocab_ids in
                  (self.vocab.encode(part), [self.vocab.mask_id])][:-1]
        return [self.vocab.cls_id, *(i for p in pieces for i in p), self.vocab.sep_id]

    def fits(self, text: str) -> bool:
        """Whether `text`, between [CLS] and [SEP], fits the model's positions."""
        return len(self._ids(text)) <= self.config.max_position_embeddings

    def fill(self, text: str, top_k: int = 3) -> list[list[tuple[str, float]]]:
        """For each [MASK] of `text`, the `top_k` most likely tokens with their probabilities."""
        ids = self._ids(text)
        positions = [n for n, i in enumerate(ids) if i == self.vocab.mask_id]
        if not positions:
            raise ValueError(f"no {MASK} in {text!r}: put {MASK} where a word should be filled")
        positions_available = self.config.max_position_embeddings
        if len(ids) > positions_available:
            raise ValueError(f"{len(ids)} tokens exceed the model's {positions_available} "
                             "positions: shorten the text")
        # A power of two (at least 8) so that sentences of similar length share one program.
        L = min(max(8, 1 << (len(ids) - 1).bit_length()), positions_available)
        row = np.zeros((1, L), np.int32)
        row[0, :len(ids)] = ids
        mask = (row > 0).astype(np.int32)
        probs = np.asarray(self._probs(self.params, row, np.zeros_like(row), mask,
                                       np.asarray([positions], np.int32)))[0]
        tokens = self.vocab.tokens
        top_k = min(top_k, len(tokens))  # the vocabulary's tokens, never the table's other rows
        return [[(tokens[i], float(p[i])) for i in np.argsort(-p)[:top_k]] for p in probs]

    def unigram_baseline(self, corpus: str | None = None,
                         limit: int = BASELINE_TOKENS) -> UnigramBaseline:
        """The most frequent token of the training text (`corpus`, by default the one the run
        recorded), tokenized with this model's vocabulary; its first `limit` tokens or so."""
        corpus = corpus or self.train_corpus
        if not corpus:
            raise ValueError(f"{self.source} does not record the corpus it trained on: give "
                             "it for the unigram baseline (bertjax-fill-mask --train_corpus)")
        counts = count_tokens(self.vocab.encode, training_documents(corpus), limit)
        if not counts:
            raise ValueError(f"training corpus {corpus!r} has no text: check the setting")
        token_id, _ = counts.most_common(1)[0]
        return UnigramBaseline(int(token_id), self.vocab.tokens[token_id],
                               sum(counts.values()), corpus)

    def held_out_batches(self, corpus: str, batches: int = 20, batch_size: int = 32,
                         seed: int = 1) -> Iterator[dict[str, np.ndarray]]:
        """Pretraining batches of `corpus` made with this model's vocabulary and the paper's
        15% / 80-10-10 masking, at the model's sequence length (at most 128)."""
        length = min(128, self.config.max_position_embeddings)
        source = BertPretrainingSource(corpus=corpus, vocab=str(self.source), seed=seed)
        with tempfile.TemporaryDirectory() as scratch:
            source.prepare(scratch)
        return itertools.islice(source.batches(0, length, batch_size), batches)

    def score(self, batches: Iterable[dict[str, np.ndarray]],
              baseline_id: int | None = None) -> HeldOutScore:
        """Masked-LM accuracy over `batches` (masked_lm_weights count), overall and at the
        positions whose input is [MASK]; with `baseline_id`, the accuracy of always guessing
        it on the same positions."""
        sums = collections.Counter()
        for batch in batches:
            guesses = np.asarray(self._guesses(self.params, batch))
            targets, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
            shown = np.take_along_axis(batch["input_ids"], batch["masked_lm_positions"], axis=1)
            masked = weights * (shown == self.vocab.mask_id)
            sums["count"] += weights.sum()
            sums["mask_count"] += masked.sum()
            sums["correct"] += (weights * (guesses == targets)).sum()
            sums["mask_correct"] += (masked * (guesses == targets)).sum()
            if baseline_id is not None:
                sums["baseline"] += (weights * (targets == baseline_id)).sum()
                sums["mask_baseline"] += (masked * (targets == baseline_id)).sum()
        share = lambda key, of: float(sums[key] / max(sums[of], 1.0))  # noqa: E731
        with_baseline = baseline_id is not None
        return HeldOutScore(share("correct", "count"), int(sums["count"]),
                            share("mask_correct", "mask_count"), int(sums["mask_count"]),
                            share("baseline", "count") if with_baseline else None,
                            share("mask_baseline", "mask_count") if with_baseline else None)

    def held_out_score(self, corpus: str, baseline_id: int | None = None, batches: int = 20,
                       batch_size: int = 32, seed: int = 1) -> HeldOutScore:
        """`score` of `batches` pretraining batches of held-out `corpus`."""
        return self.score(self.held_out_batches(corpus, batches, batch_size, seed), baseline_id)
