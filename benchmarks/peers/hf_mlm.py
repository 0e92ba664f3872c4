"""transformers' masked-LM pretraining recipe, as its `run_mlm.py` example runs it, for the
time-to-quality benchmark (benchmarks/time_to_quality.py runs this in its own process).

What it does, with transformers' public API only: the text file read by `datasets`
(`load_dataset("text")`), every line tokenized by `BertTokenizerFast` (the benchmark's WordPiece
vocab.txt, so both sides see the same tokens) with its [CLS]/[SEP], the lines concatenated and cut
into blocks of `--seq_length` (run_mlm's `group_texts`, the remainder dropped),
`BertForMaskedLM` built from a config (no pretrained weights), `DataCollatorForLanguageModeling`
at `mlm_probability=0.15` (80% [MASK], 10% random, 10% kept), and `Trainer`.

Fixed by the comparison (flags): model shape (config.json), sequence length, batch, learning
rate, warmup, the schedule's length (`--max_steps`), seed. Left at run_mlm's and
`TrainingArguments`' defaults: AdamW (torch's, betas 0.9/0.999, eps 1e-8), weight decay 0.0,
gradient clipping at 1.0, the linear schedule, dropout 0.1 (BertConfig's), float32 (bf16
mixed precision with `--device=cuda`), no evaluation during training, one data-loader process,
the whole train file tokenized before the first step. Where `datasets` is not installed (the
GPU host), the same lines are tokenized and grouped in the same batches in plain lists
(hf_budget.text_lines, map_batched).

Only the stop at the wall-clock budget and the checkpoints at wall-time points are the
benchmark's (benchmarks/peers/hf_budget.py).
"""

import time

START = time.perf_counter()  # the clock starts before any import, as on bertjax's side

import pathlib  # noqa: E402
from itertools import chain  # noqa: E402

import hf_budget  # noqa: E402 - beside this file


def group_texts(examples: dict, block_size: int) -> dict:
    """Every column concatenated and cut into blocks of `block_size` (the tail dropped)."""
    joined = {k: list(chain(*examples[k])) for k in examples}
    total = (len(joined["input_ids"]) // block_size) * block_size
    return {k: [t[i:i + block_size] for i in range(0, total, block_size)]
            for k, t in joined.items()}


def training_blocks(train_file: str, tokenizer: object, block: int, cache_dir: pathlib.Path
                    ) -> object:
    """run_mlm's training rows: every line tokenized with its special-tokens mask, the lines
    grouped into blocks of `block`."""
    raw = hf_budget.text_lines(train_file, False, cache_dir)
    tokenized = hf_budget.map_batched(
        raw, lambda batch: tokenizer(batch["text"], return_special_tokens_mask=True),
        remove_columns=("text",))
    return hf_budget.map_batched(tokenized, lambda batch: group_texts(batch, block))


def main() -> None:
    args = hf_budget.parse_args(__doc__.splitlines()[0])
    import torch  # noqa: F401, PLC0415 - every import on the peer's clock
    import transformers  # noqa: PLC0415
    from transformers import Trainer  # noqa: F401, PLC0415 - its lazy imports, now

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = hf_budget.WallClock(START)
    transformers.set_seed(args.seed)
    tokenizer = transformers.BertTokenizerFast.from_pretrained(args.tokenizer)
    config = transformers.BertConfig.from_json_file(args.model_config)
    model = transformers.BertForMaskedLM(config)
    block = min(args.seq_length, tokenizer.model_max_length)
    train = training_blocks(args.train_file, tokenizer, block, out / "datasets_cache")
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    clock.data_s = clock.now()
    hf_budget.train_on_budget("hf_mlm", args, clock, out, model, tokenizer, train,
                              collator, block)


if __name__ == "__main__":
    main()
