"""BERT pretraining examples: sentence pairs (nsp.py) masked for MLM (masking.py), in numpy blocks.

Every example is a dict of fixed-shape arrays (see `feature_spec`) and a pure function of the
seed and its global index: a stream's `examples(indices)` builds any set of examples at once
(pairs packed and masked for the whole block in a few numpy calls), so resuming at index N or
reading one host's share costs nothing for the examples skipped.

- dynamic masking (default, as RoBERTa): an endless stream of epochs. Epoch e visits the
  documents in a seeded order, a window of DOCUMENTS_PER_WINDOW documents at a time; each
  window's sentence pairs are planned with rng (seed, e, w) and shuffled with it
  (`DynamicStream`); global example i is masked with the counter-based bits of (seed, i).
- static masking (google-research/bert's create_pretraining_data.py): `dupe_factor` passes
  over the documents create a fixed table of instances, each with a fixed mask. The corpus
  is split into `static_groups` contiguous groups of documents, each paired within itself as
  the reference does per input file; row r of group g is masked with the bits of (seed, g, r)
  and pass p of group g is planned with rng (seed, g, p). Epoch e visits the groups in a
  shuffled order and each group's rows in a shuffled order (`StaticOrder`), so a reader
  that holds one group at a time (a seqio cache of the groups, `pretraining_cache`) yields
  exactly these examples.
- no masking (`masking='none'`): the dynamic stream with the inputs left as they are and no
  masked-LM targets (weights 0), for objectives that predict every token
  (`bert_ltr_pretraining`, the left-to-right ablation).
- packed rows (`packed_sequences=K`, dynamic masking): each window's shuffled instances are
  packed into rows of up to K (packing.py); global example i is then row i of the packed
  windows, and each instance in it is masked exactly as the unpacked stream masks it (with the
  bits of its unpacked index), so packing changes the layout of a step, never an instance.

Multi-host: process p of P yields the global examples i with (i // block_size) % P == p, so
the shards are disjoint, their union is the single-process stream, and with block_size = the
per-host batch each global batch holds the same examples in the same order for any P.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Literal, Protocol

import numpy as np

from bertjax.data.bert.masking import MaskedTokens, SpecialIds, mask_block
from bertjax.data.bert.nsp import Corpus, Instances, check_corpus, pack, plan_instances
from bertjax.data.bert.packing import instance_lengths, pack_examples
from bertjax.data.index_shuffle import shuffled_index
from bertjax.data.packing import most_per_row, pack_lengths
from bertjax.objectives.mlm import packed_predictions

# Stream tags: separate random numbers for each use of the seed.
_EPOCH, _MASK, _STATIC_PASS, _STATIC_ORDER, _STATIC_MASK, _STATIC_ROW_ORDER, _PACK = range(7)
_ROW_BITS = 40  # a static mask key is (group << 40) + row
BLOCK_EXAMPLES = 512  # examples built per call when iterating

Example = dict[str, np.ndarray]


def shortest_instance(nsp: bool) -> int:
    """Tokens of the shortest instance: [CLS] A [SEP] B [SEP] with NSP, else [CLS] A [SEP]."""
    return 5 if nsp else 3


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
    static_groups: int = 1  # static masking only: document groups paired on their own
    packed_sequences: int = 0  # > 1: rows packed with up to this many instances (packing.py)

    @property
    def row_predictions(self) -> int:
        """Masked positions per row: max_predictions_per_seq, or for packed rows room for
        every instance's own targets (0.15 L + K, to a multiple of 4)."""
        if not self.packed_sequences:
            return self.max_predictions_per_seq
        return max(self.max_predictions_per_seq, packed_predictions(
            self.max_seq_length, self.packed_sequences, self.masked_lm_prob))

    def __post_init__(self) -> None:
        min_length = shortest_instance(self.nsp)
        most = most_per_row(self.max_seq_length, min_length)
        checks = [
            (self.packed_sequences in (0,) or self.packed_sequences >= 2,
             "packed_sequences must be 0 (no packing) or >= 2"),
            (self.packed_sequences <= most,
             f"packed_sequences must be at most {most}, the instances a row holds"),
            (not self.packed_sequences or self.masking == "dynamic",
             "packed rows need masking='dynamic'"),
            (self.masking in ("dynamic", "static", "none"),
             "masking must be 'dynamic', 'static' or 'none'"),
            (self.max_seq_length >= min_length, f"max_seq_length must be >= {min_length}"),
            (self.max_predictions_per_seq >= 1, "max_predictions_per_seq must be >= 1"),
            (0 < self.masked_lm_prob <= 1, "masked_lm_prob must be in (0, 1]"),
            (0 <= self.short_seq_prob <= 1, "short_seq_prob must be in [0, 1]"),
            (self.dupe_factor >= 1, "dupe_factor must be >= 1"),
            (self.static_groups >= 1, "static_groups must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"PretrainingConfig: {message}; got {self}")


def feature_spec(config: PretrainingConfig) -> dict[str, tuple[tuple[int, ...], type]]:
    """Shape and dtype of every feature of an example."""
    length, predictions = (config.max_seq_length,), (config.row_predictions,)
    K = config.packed_sequences
    spec = {
        "input_ids": (length, np.int32),
        "input_mask": (length, np.int32),
        "segment_ids": (length, np.int32),
        "masked_lm_positions": (predictions, np.int32),
        "masked_lm_ids": (predictions, np.int32),
        "masked_lm_weights": (predictions, np.float32),
        "next_sentence_label": ((K,) if K else (), np.int32),
    }
    if K:  # PACKED_FEATURES
        spec.update(position_ids=(length, np.int32), sequence_ids=(length, np.int32),
                    cls_positions=((K,), np.int32), next_sentence_weights=((K,), np.float32))
    return spec


def _rng(seed: int, *counters: int) -> np.random.Generator:
    return np.random.default_rng((seed, *counters))


def _plan(corpus: Corpus, config: PretrainingConfig, rng: np.random.Generator,
          documents: tuple[int, int] | None = None,
          sources: np.ndarray | None = None) -> Instances:
    return plan_instances(corpus, rng, max_seq_length=config.max_seq_length,
                          short_seq_prob=config.short_seq_prob, nsp=config.nsp,
                          documents=documents, sources=sources)


def make_examples(corpus: Corpus, instances: Instances, special: SpecialIds,
                  config: PretrainingConfig, masking: tuple[int, int, np.ndarray],
                  is_continuation: np.ndarray | None = None) -> Example:
    """Packs a table of instances and masks row b with `masking` = (seed, stream, keys)."""
    input_ids, input_mask, segment_ids = pack(corpus, instances, special, config.max_seq_length)
    seed, stream, keys = masking
    if config.masking == "none":
        no_targets = np.zeros((len(input_ids), config.max_predictions_per_seq), np.int32)
        masked = MaskedTokens(input_ids, no_targets, no_targets, no_targets.astype(np.float32))
    else:
        masked = mask_block(input_ids, special, seed, stream, keys,
                            masked_lm_prob=config.masked_lm_prob,
                            max_predictions_per_seq=config.max_predictions_per_seq,
                            is_continuation=is_continuation)
    return {
        "input_ids": masked.input_ids,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        "masked_lm_positions": masked.masked_lm_positions,
        "masked_lm_ids": masked.masked_lm_ids,
        "masked_lm_weights": masked.masked_lm_weights,
        "next_sentence_label": instances.label.astype(np.int32),
    }


def assemble(parts: Sequence[tuple[np.ndarray, Example]], size: int) -> Example:
    """One block of `size` examples from parts (where, examples): part examples go to `where`."""
    if len(parts) == 1:
        return parts[0][1]
    first = parts[0][1]
    block = {key: np.empty((size, *value.shape[1:]), value.dtype) for key, value in first.items()}
    for where, examples in parts:
        for key, value in examples.items():
            block[key][where] = value
    return block


class _Lru(collections.OrderedDict):
    """The last few values of an expensive function of a key."""

    def __init__(self, size: int, compute: Callable) -> None:
        super().__init__()
        self.size, self.compute = size, compute

    def get_value(self, key: object) -> object:
        if key in self:
            self.move_to_end(key)
        else:
            self[key] = self.compute(key)
            while len(self) > self.size:
                self.popitem(last=False)
        return self[key]


def _runs(values: np.ndarray) -> Iterator[tuple[object, np.ndarray]]:
    """(value, positions) of each distinct value of `values`, in order of first appearance."""
    unique, first = np.unique(values, return_index=True)
    for value in unique[np.argsort(first)]:
        yield value, np.flatnonzero(values == value)


class Stream(Protocol):
    def examples(self, indices: np.ndarray) -> Example:
        """The examples at these increasing global indices, as one block."""


DOCUMENTS_PER_WINDOW = 1 << 14  # documents planned at once: the unit of dynamic planning


class DynamicStream:
    """Dynamic masking: endless epochs of freshly paired, shuffled instances, planned one
    window of documents at a time.

    Epoch e visits the documents in the order of the seeded permutation
    `shuffled_index(., D, (seed, e))` (data/index_shuffle.py), cut into windows of
    DOCUMENTS_PER_WINDOW documents. A window's documents are paired with rng (seed, e, w)
    (random next segments from the whole corpus) and its instances shuffled with it. Windows
    are numbered across epochs (window k is window k mod K of epoch k // K, K windows an
    epoch) and the global examples run through them in order. Only the windows read are
    planned, the next one in a background thread while this one is served, so a start costs
    one window whatever the corpus's size, and memory holds a few windows' tables, not an
    epoch's.
    """

    def __init__(self, corpus: Corpus, special: SpecialIds, config: PretrainingConfig,
                 seed: int, is_continuation: np.ndarray | None = None) -> None:
        self.corpus, self.special, self.config, self.seed = corpus, special, config, seed
        self.is_continuation = is_continuation
        self.windows_per_epoch = -(-corpus.num_documents // DOCUMENTS_PER_WINDOW)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="plan-window")
        # the windows served and the next, planned ahead: a block of examples may span the
        # last windows of an epoch (a few documents each) before it asks for the one after
        self._windows = _Lru(4, lambda window: self._pool.submit(self._plan_window, window))
        self._starts = [0]  # global index of the first example of windows 0, 1, ...

    def window_documents(self, window: int) -> np.ndarray:
        """The documents of window `window`, in the order they are planned."""
        epoch, w = divmod(window, self.windows_per_epoch)
        D = self.corpus.num_documents
        first = w * DOCUMENTS_PER_WINDOW
        places = np.arange(first, min(first + DOCUMENTS_PER_WINDOW, D), dtype=np.int64)
        return shuffled_index(places, D, (self.seed, _EPOCH, epoch))

    def _plan_window(self, window: int) -> Instances:
        epoch, w = divmod(window, self.windows_per_epoch)
        rng = _rng(self.seed, _EPOCH, epoch, w)
        fields = list(_plan(self.corpus, self.config, rng,
                            sources=self.window_documents(window)))
        return Instances.permuted(fields, rng.permutation(len(fields[0])))

    def window(self, window: int) -> Instances:
        """The instances of window `window`, in the order they are served."""
        return self._windows.get_value(window).result()

    def window_size(self, window: int) -> int:
        """Examples served from window `window` (0 where its documents give none)."""
        return len(self.window(window).doc)

    def window_of(self, indices: np.ndarray) -> np.ndarray:
        """Window of each global index (planning the windows before it, to count them)."""
        K = self.windows_per_epoch
        while self._starts[-1] <= indices.max(initial=0):
            window = len(self._starts) - 1
            self._starts.append(self._starts[-1] + self.window_size(window))
            if window % K == K - 1 and self._starts[-1] == self._starts[window + 1 - K]:
                raise ValueError("the corpus gives no pretraining instances: check the input "
                                 "files")  # a whole epoch's windows are empty
        return np.searchsorted(self._starts, indices, side="right") - 1

    def examples(self, indices: np.ndarray) -> Example:
        indices = np.asarray(indices, np.int64)
        parts, windows = [], self.window_of(indices)
        for window, where in _runs(windows):
            rows = indices[where] - self._starts[window]
            parts.append((where, make_examples(
                self.corpus, self.window(int(window)).take(rows), self.special, self.config,
                (self.seed, _MASK, indices[where]), self.is_continuation)))
        self._windows.get_value(int(windows[-1]) + 1)  # plan the next window meanwhile
        return assemble(parts, len(indices))


class PackedStream(DynamicStream):
    """Dynamic masking in packed rows: window k's instances (the unpacked stream's window k)
    packed into rows of up to K, the rows shuffled with rng (seed, e, w) (packing.py).

    Global example i is row i of the packed windows. Each instance is built and masked as the
    unpacked stream builds it (the bits of its unpacked global index), then placed in its row.
    """

    def __init__(self, corpus: Corpus, special: SpecialIds, config: PretrainingConfig,
                 seed: int, is_continuation: np.ndarray | None = None) -> None:
        super().__init__(corpus, special, config, seed, is_continuation)
        self._instance_starts = [0]  # unpacked global index of each window's first instance

    def _plan_window(self, window: int) -> tuple[Instances, np.ndarray]:
        """(the unpacked window's instances, its packed rows), planned in the background."""
        instances = super()._plan_window(window)
        epoch, w = divmod(window, self.windows_per_epoch)
        rows = pack_lengths(instance_lengths(instances), self.config.max_seq_length,
                            self.config.packed_sequences, _rng(self.seed, _PACK, epoch, w))
        return instances, rows

    def window(self, window: int) -> Instances:
        return self._windows.get_value(window).result()[0]

    def rows(self, window: int) -> np.ndarray:
        """int64 [R, K]: the instances (rows of `window(window)`) of each packed row, -1 none."""
        return self._windows.get_value(window).result()[1]

    def window_size(self, window: int) -> int:
        return len(self.rows(window))

    def instance_start(self, window: int) -> int:
        """The unpacked global index of window `window`'s first instance."""
        while len(self._instance_starts) <= window:
            done = len(self._instance_starts) - 1
            self._instance_starts.append(self._instance_starts[-1] + len(self.window(done).doc))
        return self._instance_starts[window]

    def examples(self, indices: np.ndarray) -> Example:
        indices = np.asarray(indices, np.int64)
        parts, windows = [], self.window_of(indices)
        for window, where in _runs(windows):
            members = self.rows(int(window))[indices[where] - self._starts[window]]  # [n, K]
            used = members[members >= 0]  # instance rows of the window, in slot order
            first = self.instance_start(int(window))
            unpacked = make_examples(self.corpus, self.window(int(window)).take(used),
                                     self.special, self.config,
                                     (self.seed, _MASK, first + used), self.is_continuation)
            local = np.full(members.shape, -1, np.int64)
            local[members >= 0] = np.arange(used.size)
            parts.append((where, pack_examples(unpacked, local, self.config.row_predictions)))
        self._windows.get_value(int(windows[-1]) + 1)  # plan the next window meanwhile
        return assemble(parts, len(indices))


class StaticOrder:
    """Where global example i of static masking reads: row `rows[i]` of group `groups[i]`.

    Epoch e = i // N (N rows in all) visits the groups in the order of a permutation drawn
    with rng (seed, e), and the rows of group g in a permutation drawn with rng (seed, e, g).
    """

    def __init__(self, seed: int, group_sizes: Sequence[int]) -> None:
        self.seed = seed
        self.sizes = np.asarray(group_sizes, np.int64)
        self.total = int(self.sizes.sum())
        if self.total == 0:
            raise ValueError("static masking has no instances: check the corpus")
        self._layouts = _Lru(2, self._layout)
        self._row_orders = _Lru(4, self._row_order)

    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(group order, start of each of its groups within the epoch)."""
        groups = _rng(self.seed, _STATIC_ORDER, epoch).permutation(len(self.sizes))
        return groups, np.concatenate([[0], np.cumsum(self.sizes[groups])])

    def _row_order(self, key: tuple[int, int]) -> np.ndarray:
        epoch, group = key
        return _rng(self.seed, _STATIC_ROW_ORDER, epoch, group).permutation(self.sizes[group])

    def segments(self, epoch: int) -> list[tuple[int, int, int]]:
        """(group, first, stop) global indices of each group's rows in epoch `epoch`."""
        groups, starts = self._layouts.get_value(epoch)
        base = epoch * self.total
        return [(int(g), base + int(a), base + int(b))
                for g, a, b in zip(groups, starts[:-1], starts[1:], strict=True) if b > a]

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group, row) of each global index."""
        indices = np.asarray(indices, np.int64)
        groups, rows = np.zeros_like(indices), np.zeros_like(indices)
        for epoch, where in _runs(indices // self.total):
            order, starts = self._layouts.get_value(int(epoch))
            position = indices[where] % self.total
            slot = np.searchsorted(starts, position, side="right") - 1
            groups[where] = order[slot]
            offset = position - starts[slot]
            for group, inner in _runs(groups[where]):
                permutation = self._row_orders.get_value((int(epoch), int(group)))
                rows[where[inner]] = permutation[offset[inner]]
        return groups, rows


def static_mask_keys(group: int, rows: np.ndarray) -> np.ndarray:
    """The masking keys of rows of a group: (group << 40) + row."""
    return (np.int64(group) << _ROW_BITS) + np.asarray(rows, np.int64)


def check_groups(corpus: Corpus, nsp: bool, numbers: Sequence[int] | None = None) -> None:
    """Raises a one-line ValueError if a static group cannot pair its documents (NSP)."""
    small = [g for g in range(corpus.num_groups) if np.diff(corpus.group(g))[0] < 2]
    if nsp and small:
        group = numbers[small[0]] if numbers is not None else small[0]
        raise ValueError(
            f"static group {group} has fewer than 2 documents, too few for random next "
            "sentences: use fewer static_groups"
        )


class StaticTable:
    """The fixed instances of static masking, group by group, and their examples.

    Corpus group k is group `numbers[k]` of the static stream (default k): a Beam worker
    holding one group's documents builds exactly the rows the whole corpus would.
    """

    def __init__(self, corpus: Corpus, special: SpecialIds, config: PretrainingConfig,
                 seed: int, is_continuation: np.ndarray | None = None,
                 numbers: Sequence[int] | None = None) -> None:
        self.corpus, self.special, self.config, self.seed = corpus, special, config, seed
        self.is_continuation = is_continuation
        self.numbers = list(numbers if numbers is not None else range(corpus.num_groups))
        check_groups(corpus, config.nsp, self.numbers)
        self._tables = _Lru(2, self._plan_group)

    def _plan_group(self, k: int) -> tuple[Instances, np.ndarray]:
        """(instances of corpus group k, pass bounds): pass p of group g uses rng (seed, g, p)."""
        passes = [_plan(self.corpus, self.config,
                        _rng(self.seed, _STATIC_PASS, self.numbers[k], dupe), self.corpus.group(k))
                  for dupe in range(self.config.dupe_factor)]
        bounds = np.concatenate([[0], np.cumsum([len(p.doc) for p in passes])])
        return Instances.concatenate(passes), bounds

    def instances(self, k: int) -> Instances:
        """The instances of corpus group k: its passes one after the other."""
        return self._tables.get_value(k)[0]

    def size(self, k: int) -> int:
        return int(self._tables.get_value(k)[1][-1])

    def pass_bounds(self, k: int) -> np.ndarray:
        """Rows [bounds[p], bounds[p + 1]) of corpus group k come from dupe pass p."""
        return self._tables.get_value(k)[1]

    def examples(self, k: int, rows: np.ndarray) -> Example:
        """Rows of corpus group k, packed; row r of group g masked with the bits of (seed, g, r)."""
        keys = static_mask_keys(self.numbers[k], rows)
        return make_examples(self.corpus, self.instances(k).take(rows), self.special, self.config,
                             (self.seed, _STATIC_MASK, keys), self.is_continuation)


class StaticStream:
    """Static masking: the fixed table of `dupe_factor` passes per group, reshuffled per epoch."""

    def __init__(self, corpus: Corpus, special: SpecialIds, config: PretrainingConfig,
                 seed: int, is_continuation: np.ndarray | None = None) -> None:
        self.table = StaticTable(corpus, special, config, seed, is_continuation)
        self.order = StaticOrder(seed, [self.table.size(g) for g in range(corpus.num_groups)])

    def examples(self, indices: np.ndarray) -> Example:
        groups, rows = self.order.locate(indices)
        parts = [(where, self.table.examples(int(g), rows[where])) for g, where in _runs(groups)]
        return assemble(parts, len(groups))


def owned_indices(start: int, process_index: int, process_count: int, block_size: int,
                  chunk: int = BLOCK_EXAMPLES) -> Iterator[np.ndarray]:
    """Successive arrays of the global indices >= start with (i // block_size) % count == index.

    Each array holds whole blocks, about `chunk` indices (the first may start mid-block).
    """
    block = start // block_size
    block += (process_index - block) % process_count
    blocks = max(1, chunk // block_size)
    within = np.arange(block_size)
    while True:
        firsts = (block + process_count * np.arange(blocks)) * block_size  # [blocks]
        indices = (firsts[:, None] + within).reshape(-1)
        yield indices[indices >= start]
        block += process_count * blocks


def make_stream(documents: Corpus | Iterable[Sequence[np.ndarray]], special: SpecialIds,
                config: PretrainingConfig, seed: int, is_continuation: np.ndarray | None = None
                ) -> DynamicStream | StaticStream | PackedStream:
    """The stream of `config.masking` over tokenized documents (a Corpus or lists of sentences)."""
    if config.whole_word_masking and is_continuation is None:
        raise ValueError(
            "whole_word_masking=True needs is_continuation (True for the vocab's '##' pieces); "
            "pass it or set whole_word_masking=False"
        )
    continuation = is_continuation if config.whole_word_masking else None
    corpus = documents if isinstance(documents, Corpus) else Corpus(documents)
    check_corpus(corpus, config.nsp)
    stream_class = StaticStream if config.masking == "static" else DynamicStream
    if config.packed_sequences:
        stream_class = PackedStream
    return stream_class(corpus, special, config, seed, continuation)


def iterate_blocks(stream: Stream, *, start_index: int = 0, process_index: int = 0,
                   process_count: int = 1, block_size: int = 1,
                   chunk: int = BLOCK_EXAMPLES) -> Iterator[Example]:
    """Endless blocks of this process's examples from global index start_index on.

    This process yields the global examples i >= start_index with (i // block_size) %
    process_count == process_index: with block_size = the per-host batch, each global batch
    holds the same examples in the same order whatever the number of hosts.
    """
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"process_index={process_index} must be in [0, process_count={process_count})"
        )
    if start_index < 0:
        raise ValueError(f"start_index={start_index} must be >= 0")
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be >= 1")
    for indices in owned_indices(start_index, process_index, process_count, block_size, chunk):
        yield stream.examples(indices)


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
) -> Iterator[Example]:
    """Endless stream of this process's examples one by one (see `iterate_blocks`).

    `documents`: a Corpus or lists of sentences, each a 1-D int array of WordPiece ids.
    `is_continuation` (bool per vocab id, True for '##' pieces) is needed for
    whole_word_masking and ignored otherwise.
    """
    blocks = iterate_blocks(make_stream(documents, special, config, seed, is_continuation),
                            start_index=start_index, process_index=process_index,
                            process_count=process_count, block_size=block_size)
    for block in blocks:
        for row in range(len(block["input_ids"])):
            yield {key: value[row] for key, value in block.items()}
