"""Logical axis names and the one table that maps them onto mesh axes.

Parameters and activations are annotated with logical names ("embed", "mlp", ...); the rules
below decide how each logical axis is laid out over the (data, fsdp, model) mesh. Changing a
parallelism strategy means editing this table, not the models.
"""

from collections.abc import Sequence

MESH_AXES = ("data", "fsdp", "model")

# (logical axis, mesh axis or axes or None). First match wins for each logical axis.
DEFAULT_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    # parameters
    ("vocab", "model"),
    ("embed", "fsdp"),
    ("mlp", "model"),
    ("heads", "model"),
    ("kv", None),
    ("position", None),
    ("segment", None),
    ("classes", None),
    ("layers", None),
    # activations
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("act_embed", None),
    ("act_mlp", "model"),
    ("act_heads", "model"),
    ("act_vocab", "model"),
)


def rules_for(overrides: Sequence[tuple[str, str | tuple[str, ...] | None]] = ()) -> tuple:
    """Default rules with `overrides` taking precedence (for ablations of the layout)."""
    overridden = {name for name, _ in overrides}
    return tuple(overrides) + tuple(r for r in DEFAULT_RULES if r[0] not in overridden)
