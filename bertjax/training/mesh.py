"""Device mesh with axes (data, fsdp, model) and shardings derived from logical axis names.

All mesh axes are `AxisType.Auto`: shardings are stated at the jit boundary and by logical
constraints inside the model, and XLA's partitioner propagates the rest. (This JAX release's
`jax.make_mesh` would otherwise default to Explicit axes, which require every op to have an
unambiguous sharding in its type; the logical-rules style of flax linen assumes Auto.)
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from bertjax.layers.partitioning import MESH_AXES
from bertjax.typing import PyTree


class MeshError(ValueError):
    """A mesh shape that does not fit the devices or the batch."""


def mesh_shape(num_devices: int, data: int = -1, fsdp: int = 1, model: int = 1) -> tuple:
    """Resolve one -1 entry so that data * fsdp * model == num_devices."""
    dims = [data, fsdp, model]
    if dims.count(-1) > 1:
        raise MeshError("only one of mesh data/fsdp/model may be -1 (fill the remaining devices)")
    known = int(np.prod([d for d in dims if d != -1]))
    if -1 in dims:
        if num_devices % known:
            raise MeshError(
                f"{num_devices} devices do not divide into fsdp*model={known}: "
                "change make_mesh.fsdp / make_mesh.model"
            )
        dims[dims.index(-1)] = num_devices // known
    if int(np.prod(dims)) != num_devices:
        raise MeshError(
            f"mesh data={dims[0]} fsdp={dims[1]} model={dims[2]} needs {int(np.prod(dims))} "
            f"devices but {num_devices} are available: set make_mesh.data=-1 to fill them"
        )
    return tuple(dims)


def make_mesh(
    data: int = -1, fsdp: int = 1, model: int = 1, devices: Sequence[jax.Device] | None = None,
    num_devices: int = -1,
) -> Mesh:
    """A (data, fsdp, model) mesh over `devices` (default: all devices), all axes Auto.

    `num_devices` > 0 keeps only the first that many of them: a run that leaves the other
    devices of a host to another job, or a quick run on a host of many (fake) CPU devices,
    where each program compiles for fewer partitions."""
    devices = list(jax.devices() if devices is None else devices)
    if num_devices == 0 or num_devices < -1 or num_devices > len(devices):
        raise MeshError(f"make_mesh.num_devices={num_devices}, but {len(devices)} devices are "
                        f"available: choose 1 to {len(devices)}, or -1 for all")
    if num_devices > 0:
        devices = devices[:num_devices]
    shape = mesh_shape(len(devices), data, fsdp, model)
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)


def data_parallel_size(mesh: Mesh) -> int:
    """Number of ways the batch is split: the product of the data and fsdp axes."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def check_batch_size(global_batch_size: int, mesh: Mesh) -> None:
    """Raise a one-line MeshError when the batch does not split evenly over the mesh."""
    ways = data_parallel_size(mesh)
    if global_batch_size % ways:
        raise MeshError(
            f"global batch size {global_batch_size} is not divisible by the {ways} data-parallel "
            f"devices (mesh data*fsdp): set train.batch_size to a multiple of {ways}"
        )


def check_batch(global_batch_size: int, accum_steps: int, mesh: Mesh) -> None:
    """The batch splits over the devices, and so does each of its `accum_steps` micro-batches."""
    check_batch_size(global_batch_size, mesh)
    micro_batch = global_batch_size // accum_steps
    if global_batch_size % accum_steps or micro_batch % data_parallel_size(mesh):
        raise MeshError(
            f"batch size {global_batch_size} with accum_steps={accum_steps} gives micro-batches "
            "that do not split over the data-parallel devices: choose train.accum_steps dividing it"
        )


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (batch) dimension split over data and fsdp; the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp")))


def logical_shardings(abstract_tree: PyTree, mesh: Mesh, rules: Sequence) -> PyTree:
    """NamedShardings for a tree of (possibly nn.Partitioned) abstract values."""
    logical_specs = nn.get_partition_spec(abstract_tree)
    return nn.logical_to_mesh_sharding(logical_specs, mesh, rules)
