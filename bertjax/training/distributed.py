"""Multi-host start-up through JAX's own distributed runtime.

On a Cloud TPU pod slice `jax.distributed.initialize()` finds its peers by itself; elsewhere
(CPU hosts, tests with several processes on one machine) the coordinator address, process
count and process id are given explicitly. CPU processes exchange collectives over gloo.
"""

import jax


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    auto: bool = False,
) -> None:
    """Join the distributed runtime when asked to (explicitly, or `auto` on a TPU pod)."""
    explicit = coordinator_address is not None
    if not (explicit or auto):
        return
    if explicit and (num_processes is None or process_id is None):
        raise ValueError(
            "--coordinator_address needs --num_processes and --process_id as well "
            "(or use --distributed on a TPU pod, where they are detected)"
        )
    if explicit:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    else:
        jax.distributed.initialize()
