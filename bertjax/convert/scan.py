"""Scanned <-> per-layer Transformer parameters.

A stack built with `scan_layers=True` keeps one block's parameters with a leading layer axis
under `layers/block` (layers/transformer.py); checkpoint formats that name each layer
(transformers' `encoder.layer.N`, google-research/bert's `layer_N`) need them one per layer,
as an unscanned stack names them: `layer_0`, `layer_1`, ...
"""

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from bertjax.typing import Params, PyTree

SCANNED, BLOCK = "layers", "block"


def is_scanned(tree: PyTree) -> bool:
    """True when some stack in `tree` holds its layers stacked (`layers/block`)."""
    if not isinstance(tree, Mapping):
        return False
    if isinstance(tree.get(SCANNED), Mapping) and BLOCK in tree[SCANNED]:
        return True
    return any(is_scanned(value) for value in tree.values())


def unstack_layers(tree: Params) -> Params:
    """`tree` with every `layers/block` (leading axis L) replaced by `layer_0` ... `layer_{L-1}`
    (numpy arrays, in the order of the layer axis)."""
    if not isinstance(tree, Mapping):
        return tree
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if key == SCANNED and isinstance(value, Mapping) and BLOCK in value:
            block = value[BLOCK]
            count = _layer_count(block)
            for i in range(count):
                out[f"layer_{i}"] = _map(lambda x, i=i: np.asarray(x)[i], block)
        else:
            out[key] = unstack_layers(value)
    return out


def stack_layers(tree: Params, like: Params) -> Params:
    """The inverse of `unstack_layers`: `tree`'s `layer_i` entries stacked into `layers/block`
    wherever `like` (the scanned tree, or its shapes) has one."""
    if not isinstance(like, Mapping):
        return tree
    out: dict[str, Any] = {}
    for key, value in like.items():
        if key == SCANNED and isinstance(value, Mapping) and BLOCK in value:
            count = _layer_count(value[BLOCK])
            layers = [tree[f"layer_{i}"] for i in range(count)]
            out[key] = {BLOCK: _map_many(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                                         layers)}
        else:
            out[key] = stack_layers(tree[key], value)
    return out


def _layer_count(block: Params) -> int:
    leaf = block
    while isinstance(leaf, Mapping):
        leaf = next(iter(leaf.values()))
    return int(np.shape(leaf)[0])


def _map(fn: Callable[..., np.ndarray], tree: PyTree) -> PyTree:
    return {k: _map(fn, v) for k, v in tree.items()} if isinstance(tree, Mapping) else fn(tree)


def _map_many(fn: Callable[..., np.ndarray], trees: list) -> PyTree:
    first = trees[0]
    if isinstance(first, Mapping):
        return {k: _map_many(fn, [t[k] for t in trees]) for k in first}
    return fn(*trees)
