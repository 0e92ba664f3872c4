"""BERT pretraining examples: sentence pairs (nsp.py) masked for MLM (masking.py), in numpy.

Every example is a dict of fixed-shape arrays (see `feature_spec`). Each random draw comes from
a generator seeded by (seed, stream, counter), so a stream is a pure function of the seed and
can resume at any example index without replaying the masking of the skipped ones.

- dynamic masking (default, as RoBERTa): an endless stream; epoch e shuffles the documents and
  builds pairs with rng (seed, e); global example i is masked with rng (seed, i).
- static masking (google-research/bert's create_pretraining_data.py): `dupe_factor` passes over
  the documents create a fixed list of instances, each with a fixed mask, shuffled anew every
  epoch. The mask of instance c is drawn from rng (seed, c) whenever it is yielded, which gives
  the same arrays as masking once at creation without holding every masked example in memory.
- no masking (`masking='none'`): the dynamic stream with the inputs left as they are and no
  masked-LM targets (weights 0), for objectives that predict every token
  (`bert_ltr_pretraining`, the left-to-right ablation).

Multi-host: process p of P yields the global examples i with i % P == p, so the shards are
disjoint, their union is the single-process stream, and a resume index means the same in both.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import numpy as np

from bertjax.data.masking import MaskedTokens, SpecialIds, mask_tokens
from bertjax.data.nsp import Corpus, PairInstance, check_corpus, iterate_instances, pack

# Stream tags: separate generators for each use of the seed.
_EPOCH, _MASK, _STATIC_PASS, _STATIC_ORDER, _STATIC_MASK = range(5)


@dataclasses.dataclass(frozen=True)
class PretrainingConfig:
    """How pretraining examples are built; defaults are BERT's (Devlin et al. 2018)."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    nsp: bool = True  # False: single-segment examples (the paper's no-NSP ablation), label 0
    whole_word_masking: bool = False
    dupe_factor: int = 10  # static masking only: passes over the corpus
    masking: Literal["dynamic", "static", "none"] = "dynamic"

    def __post_init__(self) -> None:
        min_length = 5 if self.nsp else 3
        checks = [
            (self.masking in ("dynamic", "static", "none"),
             "masking must be 'dynamic', 'static' or 'none'"),
            (self.max_seq_length >= min_length, f"max_seq_length must be >= {min_length}"),
            (self.max_predictions_per_seq >= 1, "max_predictions_per_seq must be >= 1"),
            (0 < self.masked_lm_prob <= 1, "masked_lm_prob must be in (0, 1]"),
            (0 <= self.short_seq_prob <= 1, "short_seq_prob must be in [0, 1]"),
            (self.dupe_factor >= 1, "dupe_factor must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"PretrainingConfig: {message}; got {self}")


def feature_spec(config: PretrainingConfig) -> dict[str, tuple[tuple[int, ...], type]]:
    """Shape and dtype of every feature of an example."""
    length, predictions = (config.max_seq_length,), (config.max_predictions_per_seq,)
    return {
        "input_ids": (length, np.int32),
        "input_mask": (length, np.int32),
        "segment_ids": (length, np.int32),
        "masked_lm_positions": (predictions, np.int32),
        "masked_lm_ids": (predictions, np.int32),
        "masked_lm_weights": (predictions, np.float32),
        "next_sentence_label": ((), np.int32),
    }


def make_example(
    corpus: Corpus,
    instance: PairInstance,
    special: SpecialIds,
    config: PretrainingConfig,
    rng: np.random.Generator,
    is_continuation: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Packs one instance and masks it with `rng`."""
    input_ids, input_mask, segment_ids = pack(corpus, instance, special, config.max_seq_length)
    if config.masking == "none":
        no_targets = np.zeros(config.max_predictions_per_seq, np.int32)
        masked = MaskedTokens(input_ids, no_targets, no_targets, no_targets.astype(np.float32))
    else:
        masked = mask_tokens(
        input_ids,
        special,
        rng,
        masked_lm_prob=config.masked_lm_prob,
        max_predictions_per_seq=config.max_predictions_per_seq,
        is_continuation=is_continuation,
    )
    return {
        "input_ids": masked.input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        "masked_lm_positions": masked.masked_lm_positions,
        "masked_lm_ids": masked.masked_lm_ids,
        "masked_lm_weights": masked.masked_lm_weights,
        "next_sentence_label": np.array(instance.is_random_next, np.int32),
    }


def _rng(seed: int, stream: int, counter: int) -> np.random.Generator:
    return np.random.default_rng((seed, stream, counter))


def _instance_options(config: PretrainingConfig) -> dict[str, object]:
    return {
        "max_seq_length": config.max_seq_length,
        "short_seq_prob": config.short_seq_prob,
        "nsp": config.nsp,
    }


def _dynamic_instances(corpus: Corpus, config: PretrainingConfig, seed: int) -> Iterator[tuple]:
    """Endless (instance, mask rng key) pairs; the key is the global example index."""
    index = 0
    for epoch in itertools.count():
        rng = _rng(seed, _EPOCH, epoch)
        order = rng.permutation(corpus.num_documents)
        for instance in iterate_instances(corpus, order, rng, **_instance_options(config)):
            yield index, instance, (_MASK, index)
            index += 1


def static_instances(corpus: Corpus, config: PretrainingConfig, seed: int) -> np.ndarray:
    """The fixed instance table of static masking: int64 [N, 7] rows of PairInstance."""
    table: list[PairInstance] = []
    for dupe in range(config.dupe_factor):
        rng = _rng(seed, _STATIC_PASS, dupe)
        table.extend(
            iterate_instances(corpus, range(corpus.num_documents), rng, **_instance_options(config))
        )
    return np.array(table, np.int64).reshape(-1, len(PairInstance._fields))


def _owned_indices(
    start: int, process_index: int, process_count: int, block_size: int
) -> Iterator[int]:
    """Global indices >= start with (i // block_size) % process_count == process_index."""
    block = start // block_size
    block += (process_index - block) % process_count
    while True:
        first = block * block_size
        yield from range(max(first, start), first + block_size)
        block += process_count


def _static_instances(
    corpus: Corpus, config: PretrainingConfig, seed: int, indices: Iterator[int]
) -> Iterator[tuple]:
    """(index, instance, mask rng key) for the given increasing indices of the loop."""
    table = static_instances(corpus, config, seed)
    epoch, order = -1, None
    for index in indices:
        e, position = divmod(index, len(table))
        if e != epoch:
            epoch, order = e, _rng(seed, _STATIC_ORDER, e).permutation(len(table))
        created = int(order[position])
        yield index, PairInstance(*table[created].tolist()), (_STATIC_MASK, created)


def iterate_examples(
    documents: Corpus | Iterable[Sequence[np.ndarray]],
    special: SpecialIds,
    config: PretrainingConfig = PretrainingConfig(),
    *,
    seed: int = 0,
    start_index: int = 0,
    process_index: int = 0,
    process_count: int = 1,
    is_continuation: np.ndarray | None = None,
    block_size: int = 1,
) -> Iterator[dict[str, np.ndarray]]:
    """Endless stream of this process's pretraining examples, from global index start_index.

    `documents`: lists of sentences, each a 1-D int array of WordPiece ids. This process yields
    the global examples i >= start_index with (i // block_size) % process_count ==
    process_index: with block_size = the per-host batch, each global batch holds the same
    examples in the same order whatever the number of hosts.
    `is_continuation` (bool per vocab id, True for '##' pieces) is needed for
    whole_word_masking and ignored otherwise.
    """
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"process_index={process_index} must be in [0, process_count={process_count})"
        )
    if start_index < 0:
        raise ValueError(f"start_index={start_index} must be >= 0")
    if config.whole_word_masking and is_continuation is None:
        raise ValueError(
            "whole_word_masking=True needs is_continuation (True for the vocab's '##' pieces); "
            "pass it or set whole_word_masking=False"
        )
    continuation = is_continuation if config.whole_word_masking else None
    corpus = documents if isinstance(documents, Corpus) else Corpus(documents)
    check_corpus(corpus, config.nsp)
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be >= 1")
    if config.masking == "static":
        indices = _owned_indices(start_index, process_index, process_count, block_size)
        stream = _static_instances(corpus, config, seed, indices)
    else:
        stream = (
            item
            for item in _dynamic_instances(corpus, config, seed)
            if item[0] >= start_index and (item[0] // block_size) % process_count == process_index
        )
    for _, instance, (tag, key) in stream:
        yield make_example(corpus, instance, special, config, _rng(seed, tag, key), continuation)
