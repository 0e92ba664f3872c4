"""Names for the trees of arrays the package passes around, where no library type says more.

JAX has no type for a pytree, and flax's parameters are plain nested dicts: these aliases say
what a value holds, so a signature reads as what it takes. A concrete type (`jax.Array`,
`TrainState`, `optax.OptState`, a config class) is used instead wherever one exists.
"""

from collections.abc import Mapping
from typing import Any, TypeAlias

Params: TypeAlias = Mapping[str, Any]
"""A model's parameters: flax's "params" collection (`variables["params"]`, what a loss takes
and `TrainState.params` holds), module names to nested dicts whose leaves are `jax.Array` (or
`jax.ShapeDtypeStruct` for abstract parameters, and `nn.LogicallyPartitioned` boxes before
`nn.unbox`). A subtree of it (BERT's "bert" encoder) is one too."""

PyTree: TypeAlias = Any
"""A JAX pytree of any structure (nested dicts, lists, tuples, dataclasses, flax structs): for
the tree utilities that walk, map or reshape whatever tree they are given (their leaves:
arrays, shape structs or shardings, as each says)."""
