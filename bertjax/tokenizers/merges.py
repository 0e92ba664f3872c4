"""Pair merges, shared by the tokenizers that learn or apply them: byte-level BPE (GPT-2),
GPT-1's character-level BPE and WordPiece's learner.

`learned_merges` finds merges as BPE learning does (Sennrich et al. 2016): repeatedly the most
frequent adjacent pair over a corpus's words (ties by the pair's strings), merged in every word
that holds it, with pair counts kept up to date incrementally (a heap of counts, re-queued when
an entry has gone stale). `apply_merges` splits a word by a learned table: repeatedly the
adjacent pair of lowest rank, as GPT-2's and GPT-1's encoders do.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence

NEVER = 1 << 62  # the rank of a pair that is not a merge


def apply_merges(parts: list[str], ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """`parts` (a word's symbols) merged by rank: the lowest-ranked adjacent pair first,
    every occurrence of it at once, until no adjacent pair is a merge."""
    while len(parts) > 1:
        rank, pair = min((ranks.get(p, NEVER), p) for p in zip(parts, parts[1:], strict=False))
        if rank == NEVER:
            break
        parts = _merged(parts, *pair, pair[0] + pair[1])
    return parts


def learned_merges(words: Sequence[Sequence[str]], freqs: Sequence[int],
                   join: Callable[[str, str], str] = str.__add__
                   ) -> Iterator[tuple[str, str, str]]:
    """(a, b, join(a, b)) for each merge, in learning order, until only pairs seen once remain
    (merging those would memorize words seen once). The caller stops when its budget is met."""
    words = [list(w) for w in words]
    pair_counts: collections.Counter[tuple[str, str]] = collections.Counter()
    holders: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, parts in enumerate(words):
        for pair in zip(parts, parts[1:], strict=False):
            pair_counts[pair] += freqs[i]
            holders[pair].add(i)
    heap = [(-c, a, b) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while heap:
        neg_count, a, b = heapq.heappop(heap)
        count = pair_counts.get((a, b), 0)
        if count != -neg_count:  # stale entry: requeue at its current count
            if count > 0:
                heapq.heappush(heap, (-count, a, b))
            continue
        if count < 2:
            return
        merged = join(a, b)
        yield a, b, merged
        for pair in _merge_everywhere(a, b, merged, words, freqs, pair_counts, holders):
            if pair_counts.get(pair, 0) > 0:
                heapq.heappush(heap, (-pair_counts[pair], *pair))


def _merged(parts: list[str], a: str, b: str, merged: str) -> list[str]:
    out, j = [], 0
    while j < len(parts):
        if j + 1 < len(parts) and parts[j] == a and parts[j + 1] == b:
            out.append(merged)
            j += 2
        else:
            out.append(parts[j])
            j += 1
    return out


def _merge_everywhere(a: str, b: str, merged: str, words: list[list[str]],
                      freqs: Sequence[int], pair_counts: collections.Counter,
                      holders: dict[tuple[str, str], set[int]]) -> set[tuple[str, str]]:
    """Merge a+b in every word holding the pair; update the counts; return the new pairs."""
    new_pairs: set[tuple[str, str]] = set()
    for i in sorted(holders.pop((a, b), ())):
        parts = words[i]
        out = _merged(parts, a, b, merged)
        if len(out) == len(parts):
            continue  # the holder set was stale for this word
        for pair in zip(parts, parts[1:], strict=False):
            pair_counts[pair] -= freqs[i]
        for pair in zip(out, out[1:], strict=False):
            pair_counts[pair] += freqs[i]
            if merged in pair:
                new_pairs.add(pair)
                holders[pair].add(i)
        words[i] = out
    pair_counts.pop((a, b), None)
    return new_pairs
