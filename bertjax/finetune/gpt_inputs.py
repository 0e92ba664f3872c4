"""GPT's task-specific input transformations (Radford et al. 2018, section 3.3, figure 1).

Structured inputs become token sequences around three new tokens, start <s>, delimiter $ and
extract <e>, whose final-block activation feeds the linear output layer:

    classification   <s> text <e>                                  1 sequence
    entailment       <s> premise $ hypothesis <e>                  1 sequence
    similarity       <s> a $ b <e>,  <s> b $ a <e>                 2 sequences (activations added)
    multiple_choice  <s> context $ answer_k <e>  for each k        K sequences (softmax over k)

Examples are token-id lists per field; `encode` right-pads them to [B, N, L] with a mask, and
cuts the longest field from its end until a sequence fits `max_length`.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

KINDS = ("classification", "entailment", "similarity", "multiple_choice")
FIELDS = {  # kind: the JSON fields of one example, in order
    "classification": ("text",),
    "entailment": ("premise", "hypothesis"),
    "similarity": ("text_a", "text_b"),
    "multiple_choice": ("context", "choices"),
}


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """Ids of the start, delimiter and extract tokens (appended after the LM's vocabulary)."""

    start: int
    delimiter: int
    extract: int

    @classmethod
    def after(cls, vocab_size: int) -> "SpecialTokens":
        return cls(vocab_size, vocab_size + 1, vocab_size + 2)


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown fine-tuning task {kind!r}: choose one of {', '.join(KINDS)}")


def _fit(fields: list[list[int]], budget: int) -> list[list[int]]:
    """Cut the longest field's tail until the fields' total length is at most `budget`."""
    fields = [list(f) for f in fields]
    while sum(len(f) for f in fields) > budget:
        longest = max(range(len(fields)), key=lambda i: len(fields[i]))
        if not fields[longest]:
            break
        fields[longest].pop()
    return fields


def sequences(kind: str, example: Sequence, special: SpecialTokens, max_length: int
              ) -> list[list[int]]:
    """The token sequences of one example (fields as token-id lists; choices a list of them)."""
    check_kind(kind)
    s, d, e = special.start, special.delimiter, special.extract
    if kind == "classification":
        (text,) = _fit([example[0]], max_length - 2)
        return [[s, *text, e]]
    if kind == "multiple_choice":
        context, choices = example
        out = []
        for choice in choices:
            ctx, ans = _fit([context, choice], max_length - 3)
            out.append([s, *ctx, d, *ans, e])
        return out
    a, b = _fit([example[0], example[1]], max_length - 3)
    if kind == "entailment":
        return [[s, *a, d, *b, e]]
    return [[s, *a, d, *b, e], [s, *b, d, *a, e]]  # similarity: both orderings


def encode(kind: str, examples: Sequence[Sequence], labels: Sequence[float] | None,
           special: SpecialTokens, max_length: int) -> dict[str, np.ndarray]:
    """input_ids / input_mask [B, N, L] (right-padded with 0) and label [B] (float32: a class
    index, or the target of a regression when the head has one output)."""
    rows = [sequences(kind, ex, special, max_length) for ex in examples]
    counts = {len(r) for r in rows}
    if len(counts) != 1:
        raise ValueError(f"examples have {sorted(counts)} choices: give every multiple-choice "
                         "example the same number of choices")
    B, N = len(rows), counts.pop()
    L = max(len(seq) for r in rows for seq in r)
    ids = np.zeros((B, N, L), np.int32)
    mask = np.zeros((B, N, L), np.int32)
    for b, r in enumerate(rows):
        for n, seq in enumerate(r):
            ids[b, n, :len(seq)], mask[b, n, :len(seq)] = seq, 1
    batch = {"input_ids": ids, "input_mask": mask}
    if labels is not None:
        batch["label"] = np.asarray(labels, np.float32)
    return batch
