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
gradient clipping at 1.0, the linear schedule, dropout 0.1 (GPT2Config's), float32, no
evaluation during training, one data-loader process. Only the stop at the wall-clock budget and
the checkpoints at wall-time points are the benchmark's (benchmarks/peers/hf_budget.py).
"""

import time

START = time.perf_counter()  # the clock starts before any import, as on bertjax's side

import pathlib  # noqa: E402

import hf_budget  # noqa: E402 - beside this file
from hf_mlm import group_texts  # noqa: E402 - the same packing as run_mlm's


def main() -> None:
    args = hf_budget.parse_args(__doc__.splitlines()[0])
    import datasets  # noqa: PLC0415 - every import on the peer's clock
    import torch  # noqa: F401, PLC0415
    import transformers  # noqa: PLC0415
    from transformers import Trainer  # noqa: F401, PLC0415 - its lazy imports, now

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = hf_budget.WallClock(START)
    transformers.set_seed(args.seed)
    raw = datasets.load_dataset("text", data_files={"train": args.train_file},
                                keep_linebreaks=True, cache_dir=str(out / "datasets_cache"))
    tokenizer = transformers.GPT2TokenizerFast.from_pretrained(args.tokenizer)
    config = transformers.GPT2Config.from_json_file(args.model_config)
    model = transformers.GPT2LMHeadModel(config)
    block = min(args.seq_length, tokenizer.model_max_length)
    tokenized = raw["train"].map(lambda batch: tokenizer(batch["text"]), batched=True,
                                 remove_columns=["text"])

    def blocks_with_labels(batch: dict) -> dict:
        grouped = group_texts(batch, block)
        grouped["labels"] = [ids.copy() for ids in grouped["input_ids"]]
        return grouped

    train = tokenized.map(blocks_with_labels, batched=True)
    clock.data_s = clock.now()
    hf_budget.train_on_budget("hf_clm", args, clock, out, model, tokenizer, train,
                              transformers.default_data_collator, block)


if __name__ == "__main__":
    main()
