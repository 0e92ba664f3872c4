"""What transformers' pretraining scripts share in the time-to-quality benchmark: their flags,
a wall-clock budget for `Trainer`, and checkpoints at wall-time points.

The scripts themselves (benchmarks/peers/hf_mlm.py, hf_clm.py) do what transformers'
`examples/pytorch/language-modeling/run_mlm.py` and `run_clm.py` do; this module adds only what
the benchmark needs around them: `Trainer` stops when the budget is spent (a callback after each
step) and saves the model (`save_pretrained`, weights and config) at evenly spaced points of the
budget. Save time is taken off the clock, as on bertjax's side, and every point is written to
OUT/points.json for the scorer (benchmarks/time_to_quality.py).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from typing import Any


def parse_args(description: str) -> argparse.Namespace:
    """The flags both peer scripts take (the comparison fixes these; the rest are defaults)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--train_file", required=True, help="plain text, one example a line")
    p.add_argument("--model_config", required=True, help="transformers config.json to build")
    p.add_argument("--tokenizer", required=True, help="directory of tokenizer files")
    p.add_argument("--out", required=True, help="a new directory: checkpoints and points.json")
    p.add_argument("--budget_s", type=float, required=True,
                   help="training wall-clock seconds from process start, saves not counted")
    p.add_argument("--checkpoints", type=int, default=5,
                   help="checkpoints at evenly spaced points of the budget (the last at its end)")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--seq_length", type=int, default=128)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--warmup_steps", type=int, default=0)
    p.add_argument("--max_steps", type=int, required=True,
                   help="the linear schedule's length; training also ends there")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cpu: float32 on the CPU; cuda: the GPU with bf16 mixed precision "
                        "(run_mlm's --bf16, as its users run it on a Hopper GPU)")
    return p.parse_args()


class WallClock:
    """Seconds since `start` (the process's first line) less the time spent saving."""

    def __init__(self, start: float):
        self.start, self.saving = start, 0.0
        self.imports_s = self.now()  # made once the side's libraries are imported
        self.data_s = 0.0  # when the training data was tokenized and packed

    def now(self) -> float:
        return time.perf_counter() - self.start - self.saving


def budget_callback(clock: WallClock, out: pathlib.Path, budget_s: float, checkpoints: int,
                    tokens_per_step: int) -> Any:
    """A TrainerCallback: checkpoints at budget * i / checkpoints, stop at the budget; writes
    OUT/points.json when training ends. Built here so transformers is imported only by the
    scripts (their import is on their clock)."""
    from transformers import TrainerCallback  # noqa: PLC0415 - on the peer's clock

    class Budget(TrainerCallback):
        def __init__(self) -> None:
            self.points: list[dict[str, Any]] = []
            self.next_point = 1
            self.first_step_s: float | None = None
            self.last: tuple[int, float] = (0, 0.0)

        def save(self, model: Any, step: int, wall_s: float) -> None:
            begin = time.perf_counter()
            path = out / "checkpoints" / str(step)
            model.save_pretrained(path)
            seconds = time.perf_counter() - begin
            clock.saving += seconds
            self.points.append({"step": step, "wall_s": wall_s, "save_s": seconds,
                                "path": str(path)})

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                        **kwargs: Any) -> Any:
            wall_s = clock.now()
            self.first_step_s = self.first_step_s or wall_s
            self.last = (state.global_step, wall_s)
            due = wall_s >= budget_s * self.next_point / checkpoints
            if due or wall_s >= budget_s:
                while self.next_point <= checkpoints and \
                        wall_s >= budget_s * self.next_point / checkpoints:
                    self.next_point += 1
                self.save(model, state.global_step, wall_s)
            if wall_s >= budget_s:
                control.should_training_stop = True
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None,
                         **kwargs: Any) -> Any:
            step, wall_s = self.last
            if step and (not self.points or self.points[-1]["step"] != step):
                self.save(model, step, wall_s)  # the schedule ended before the budget
            write_points(out, self.points, self.first_step_s, self.last, tokens_per_step,
                         stopped="budget" if wall_s >= budget_s else "max_steps",
                         clock=clock)
            return control

    return Budget()


def train_on_budget(name: str, args: argparse.Namespace, clock: WallClock, out: pathlib.Path,
                    model: Any, tokenizer: Any, train: Any, collator: Any, block: int) -> None:
    """`Trainer` with the scripts' own TrainingArguments (the flags' batch, rate, warmup, steps
    and seed; CPU, no saving or logging of its own) and the budget callback, trained; prints
    the steps made."""
    import transformers  # noqa: PLC0415 - on the peer's clock

    training_args = transformers.TrainingArguments(
        output_dir=str(out / "trainer"), per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        max_steps=args.max_steps, seed=args.seed, save_strategy="no", report_to="none",
        use_cpu=args.device == "cpu", bf16=args.device == "cuda", disable_tqdm=True,
        logging_strategy="no")
    budget = budget_callback(clock, out, args.budget_s, args.checkpoints,
                             args.batch_size * block)
    trainer = transformers.Trainer(model=model, args=training_args, train_dataset=train,
                                   processing_class=tokenizer, data_collator=collator,
                                   callbacks=[budget])
    trainer.train()
    print(f"{name}: {budget.last[0]} steps in {budget.last[1]:.1f} s; {len(train)} blocks of "
          f"{block}")


def text_lines(train_file: str, keep_linebreaks: bool, cache_dir: pathlib.Path) -> Any:
    """The train file's lines as `datasets.load_dataset("text")` gives them (the scripts'
    reader); where `datasets` is not installed (a GPU image), the same lines in a list of
    records, which `map_batched` then tokenizes and groups as `Dataset.map` would."""
    try:
        import datasets  # noqa: PLC0415 - on the peer's clock
    except ImportError:
        text = pathlib.Path(train_file).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=keep_linebreaks)
        return [{"text": line} for line in lines]
    return datasets.load_dataset("text", data_files={"train": train_file},
                                 keep_linebreaks=keep_linebreaks,
                                 cache_dir=str(cache_dir))["train"]


def map_batched(rows: Any, function: Any, remove_columns: tuple[str, ...] = (),
                batch_size: int = 1000) -> Any:
    """`rows.map(function, batched=True, remove_columns=...)` for a `datasets.Dataset`; for a
    list of records the same: batches of 1,000 rows as columns, through `function`, back to
    records."""
    if not isinstance(rows, list):
        return rows.map(function, batched=True, remove_columns=list(remove_columns) or None)
    out: list[dict[str, Any]] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        columns = {key: [row[key] for row in chunk] for key in chunk[0]}
        mapped = dict(function(columns))
        kept = {k: v for k, v in columns.items() if k not in remove_columns and k not in mapped}
        merged = {**kept, **{k: list(v) for k, v in mapped.items()}}
        out += [dict(zip(merged, values, strict=True))
                for values in zip(*merged.values(), strict=True)]
    return out


def write_points(out: pathlib.Path, points: list[dict[str, Any]], first_step_s: float | None,
                 last: tuple[int, float], tokens_per_step: int, stopped: str,
                 clock: WallClock) -> None:
    """OUT/points.json: the checkpoints and where the side's time went (both sides write it)."""
    step, wall_s = last
    rate = (step - 1) / (wall_s - first_step_s) if first_step_s and wall_s > first_step_s \
        else 0.0
    (out / "points.json").write_text(json.dumps({
        "points": points, "first_step_s": first_step_s or 0.0, "steps": step,
        "last_step_s": wall_s, "steps_per_s": rate, "tokens_per_step": tokens_per_step,
        "imports_s": clock.imports_s, "data_s": clock.data_s, "save_s": clock.saving,
        "stopped": stopped}, indent=1) + "\n")
