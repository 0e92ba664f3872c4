"""A terminal progress bar: step, chosen metrics, tokens/s and ETA (tqdm)."""

import sys

import jax
from tqdm import tqdm


class ProgressBar:
    """Shows `labels` metrics on process 0; silent elsewhere or when disabled."""

    def __init__(
        self, total: int, initial: int, labels: tuple[tuple[str, str], ...], enabled: bool = True
    ):
        self.labels = labels
        self.shown: dict[str, float] = {}  # the last values, kept until replaced
        self.bar = None
        if enabled and jax.process_index() == 0:
            self.bar = tqdm(
                total=total,
                initial=initial,
                unit="step",
                dynamic_ncols=True,
                file=sys.stderr,
                smoothing=0.1,
            )

    def note(self, scalars: dict[str, float]) -> None:
        """Show `scalars` (e.g. the last evaluation's) beside the training metrics."""
        self.update(self.bar.n if self.bar else 0, scalars)

    def update(self, step: int, scalars: dict[str, float] | None) -> None:
        if self.bar is None:
            return
        self.bar.update(step - self.bar.n)
        if scalars:
            self.shown.update(scalars)
            shown = self.shown
            postfix = {label: f"{shown[key]:.4f}" for key, label in self.labels if key in shown}
            postfix["tok/s"] = f"{shown.get('tokens_per_second', 0):,.0f}"
            self.bar.set_postfix(postfix, refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
