"""Training: the loop, its step, state, mesh, checkpoints and workdir, and the one entry that
runs them, `bertjax.training.run` (training/session.py)."""

from bertjax.training.session import Job, run

__all__ = ["Job", "run"]
