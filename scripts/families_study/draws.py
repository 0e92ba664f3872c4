"""The learning curve's labelled sets: stratified draws of AG News's training rows, each split
into the rows a run trains on and a held-out tenth that chooses its learning rate.

Draw d of size N takes N // classes rows of every class (the remainder to the classes in
order) from `train.tsv`, with a generator seeded by (N, d), so a size's draws differ from one
another and every arm of the study (pretrained, random init, bag-of-words) reads the same
rows of draw d: the arms are paired. The held-out tenth is stratified the same way (at least
one row of each class), and nothing of the test file takes part in any choice.
"""

from __future__ import annotations

import dataclasses

import numpy as np

SELECTION_SHARE = 0.1


@dataclasses.dataclass(frozen=True)
class Draw:
    """Row indices (into the training file) of one draw: `train` to fit, `selection` to
    choose a learning rate or an L2 weight on."""

    labels: int
    draw: int
    train: tuple[int, ...]
    selection: tuple[int, ...]

    @property
    def rows(self) -> tuple[int, ...]:
        """Every row of the draw, training and selection."""
        return tuple(sorted(self.train + self.selection))


def _per_class(count: int, classes: int) -> list[int]:
    return [count // classes + (1 if c < count % classes else 0) for c in range(classes)]


def stratified(rng: np.random.Generator, by_class: list[np.ndarray], counts: list[int]
               ) -> list[np.ndarray]:
    """`counts[c]` indices drawn without replacement from each class's indices."""
    return [rng.choice(rows, size=n, replace=False) if n < len(rows) else rows.copy()
            for rows, n in zip(by_class, counts, strict=True)]


def make_draw(labels: list[str], size: int, draw: int) -> Draw:
    """Draw `draw` of `size` labelled rows of `labels` (the training file's label column)."""
    names = sorted(set(labels))
    column = np.asarray(labels)
    by_class = [np.flatnonzero(column == name) for name in names]
    if size > len(labels):
        raise ValueError(f"a draw of {size} rows from a file of {len(labels)}: lower "
                         "families_study.labels to at most the training rows")
    rng = np.random.default_rng([size, draw])
    if size == len(labels):
        chosen = by_class
    else:
        chosen = stratified(rng, by_class, _per_class(size, len(names)))
    held = _per_class(max(len(names), round(SELECTION_SHARE * size)), len(names))
    held = [min(n, max(len(rows) - 1, 1)) for n, rows in zip(held, chosen, strict=True)]
    selection = [rng.choice(rows, size=n, replace=False) for rows, n in zip(chosen, held,
                                                                              strict=True)]
    train = [np.setdiff1d(rows, picked) for rows, picked in zip(chosen, selection,
                                                                 strict=True)]
    return Draw(size, draw, tuple(sorted(int(i) for rows in train for i in rows)),
                tuple(sorted(int(i) for rows in selection for i in rows)))
