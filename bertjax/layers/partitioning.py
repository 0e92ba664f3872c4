"""Logical axis names and the one table that maps them onto mesh axes.

Parameters and activations are annotated with logical names ("embed", "mlp", ...); the rules
below decide how each logical axis is laid out over the (data, fsdp, model) mesh. Changing a
parallelism strategy means editing this table, not the models.
"""

from collections.abc import Sequence

import jax

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


def target_device() -> tuple[str, str]:
    """(platform, device kind) of the mesh the step is built for (a TPU slice's, also when
    compiling ahead of time on a CPU host), else of the default device."""
    mesh = jax.sharding.get_abstract_mesh()
    if not mesh.empty and mesh.abstract_device is not None:
        return mesh.abstract_device.platform, mesh.abstract_device.device_kind
    return jax.devices()[0].platform, jax.devices()[0].device_kind
