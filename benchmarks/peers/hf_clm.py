"""transformers' causal-LM pretraining recipe, as its `run_clm.py` example runs it, for the
time-to-quality benchmark's GPT row (benchmarks/time_to_quality.py runs this in its own
process).

What it does, with transformers' public API only: the text file read by `datasets`
(`load_dataset("text", keep_linebreaks=True)`, run_clm's default), every line tokenized by
`GPT2TokenizerFast` (the benchmark's byte-level BPE files, so both sides see the same tokens),
the lines concatenated and cut into blocks of `--seq_length` with labels = inputs (run_clm's
`group_texts`; the model shifts them), `GPT2LMHeadModel` built from a config (no pretrained
weights), `default_data_collator` and `Trainer`.

Fixed by the comparison (flags): model shape (config.json), sequence length, batch, learning
rate, warmup, the schedule's length (`--max_steps`), seed. Left at run_clm's and
`TrainingArguments`' defaults: AdamW (torch's, betas 0.9/0.999, eps 1e-8), weight decay 0.0,
gradient clipping at 1.0, the linear schedule, dropout 0.1 (GPT2Config's), float32 (bf16
mixed precision with `--device=cuda`), no evaluation during training, one data-loader process.
Where `datasets` is not installed (the GPU host), the same lines are tokenized and grouped in
the same batches in plain lists (hf_budget.text_lines, map_batched).

Only the stop at the wall-clock budget and the checkpoints at wall-time points are the
benchmark's (benchmarks/peers/hf_budget.py).
"""

import time

START = time.perf_counter()  # the clock starts before any import, as on bertjax's side

import pathlib  # noqa: E402

import hf_budget  # noqa: E402 - beside this file
from hf_mlm import group_texts  # noqa: E402 - the same packing as run_mlm's


def training_blocks(train_file: str, tokenizer: object, block: int, cache_dir: pathlib.Path
                    ) -> object:
    """run_clm's training rows: every line tokenized with its line break, the lines grouped
    into blocks of `block`, labels = inputs."""
    raw = hf_budget.text_lines(train_file, True, cache_dir)
    tokenized = hf_budget.map_batched(raw, lambda batch: tokenizer(batch["text"]),
                                      remove_columns=("text",))

    def blocks_with_labels(batch: dict) -> dict:
        grouped = group_texts(batch, block)
        grouped["labels"] = [ids.copy() for ids in grouped["input_ids"]]
        return grouped

    return hf_budget.map_batched(tokenized, blocks_with_labels)


def main() -> None:
    args = hf_budget.parse_args(__doc__.splitlines()[0])
    import torch  # noqa: F401, PLC0415 - every import on the peer's clock
    import transformers  # noqa: PLC0415
    from transformers import Trainer  # noqa: F401, PLC0415 - its lazy imports, now

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = hf_budget.WallClock(START)
    transformers.set_seed(args.seed)
    tokenizer = transformers.GPT2TokenizerFast.from_pretrained(args.tokenizer)
    config = transformers.GPT2Config.from_json_file(args.model_config)
    model = transformers.GPT2LMHeadModel(config)
    block = min(args.seq_length, tokenizer.model_max_length)
    train = training_blocks(args.train_file, tokenizer, block, out / "datasets_cache")
    clock.data_s = clock.now()
    hf_budget.train_on_budget("hf_clm", args, clock, out, model, tokenizer, train,
                              transformers.default_data_collator, block)


if __name__ == "__main__":
    main()
