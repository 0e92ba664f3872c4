"""The time-to-quality benchmark's one scorer: bertjax scores every checkpoint of every row,
bertjax's and transformers', on the same held-out rows with the same fixed masks.

Held-out rows are built as transformers' scripts build their training rows (`group_texts`):
each held-out line tokenized (BERT: [CLS] line [SEP]; GPT-2: the line with its line break), the
lines concatenated and cut into blocks of the sequence length. That is the peer's training format,
not bertjax's ([CLS] segment [SEP]), so the format favours the peer if anyone. BERT's masks are
drawn once from a fixed seed: round(15%) of each row's non-special tokens (at most the
prediction slots), 80% [MASK], 10% a random token, 10% kept; the loss and accuracy are over
every selected position. GPT-2's is the next-token loss over the row's L - 1 predictions, as
transformers shifts its labels.

transformers' checkpoints are read with bertjax's Hugging Face import
(`bertjax.convert.hf_bert.fill_pretrained`, `hf_gpt.load_hf_gpt`); bertjax's with its
checkpoint reader (`restore_saved_params`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

SPECIAL_BERT = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@dataclasses.dataclass(frozen=True)
class Heldout:
    """Fixed evaluation rows of one family: feature name -> [rows, ...] arrays."""

    family: str  # "bert" or "gpt"
    arrays: dict[str, np.ndarray]

    @property
    def rows(self) -> int:
        return len(self.arrays["input_ids"])

    def batches(self, size: int) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, self.rows, size):
            yield {k: v[start:start + size] for k, v in self.arrays.items()}


def _blocks(ids: list[int], seq_length: int, max_rows: int) -> np.ndarray:
    rows = min(len(ids) // seq_length, max_rows)
    if rows < 1:
        raise ValueError(f"the held-out text has {len(ids)} tokens, fewer than one row of "
                         f"{seq_length}: pass a larger corpus or a larger --heldout_share")
    return np.asarray(ids[:rows * seq_length], np.int32).reshape(rows, seq_length)


def bert_heldout(lines: list[str], vocab_txt: pathlib.Path, seq_length: int, max_rows: int,
                 seed: int = 1234) -> Heldout:
    """Masked rows of the held-out lines (see the module docstring)."""
    from bertjax.objectives.mlm import packed_predictions  # noqa: PLC0415
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary  # noqa: PLC0415

    vocab = WordPieceVocabulary(vocab_txt, lower_case=True)
    ids: list[int] = []
    for line in lines:
        ids += [vocab.cls_id, *vocab.encode(line), vocab.sep_id]
    input_ids = _blocks(ids, seq_length, max_rows)
    slots = packed_predictions(seq_length)
    special = np.isin(input_ids, [vocab.token_to_id(t) for t in SPECIAL_BERT])
    rng = np.random.default_rng(seed)
    positions = np.zeros((len(input_ids), slots), np.int32)
    targets = np.zeros_like(positions)
    weights = np.zeros(positions.shape, np.float32)
    masked = input_ids.copy()
    for row, ids_row in enumerate(input_ids):
        candidates = np.flatnonzero(~special[row])
        count = min(slots, max(1, round(0.15 * len(candidates))))
        chosen = np.sort(rng.choice(candidates, count, replace=False))
        positions[row, :count], targets[row, :count] = chosen, ids_row[chosen]
        weights[row, :count] = 1.0
        draw = rng.random(count)
        masked[row, chosen[draw < 0.8]] = vocab.mask_id
        randoms = chosen[(draw >= 0.8) & (draw < 0.9)]
        masked[row, randoms] = rng.integers(0, vocab.vocab_size, len(randoms))
    return Heldout("bert", {
        "input_ids": masked, "input_mask": np.ones_like(masked),
        "segment_ids": np.zeros_like(masked), "masked_lm_positions": positions,
        "masked_lm_ids": targets, "masked_lm_weights": weights,
        "next_sentence_label": np.zeros(len(masked), np.int32)})


def gpt_heldout(lines: list[str], bpe_dir: pathlib.Path, seq_length: int, max_rows: int
                ) -> Heldout:
    """Next-token rows of the held-out lines, each line with its line break (run_clm's)."""
    from bertjax.tokenizers.bpe import ByteLevelBPE  # noqa: PLC0415

    bpe = ByteLevelBPE.from_files(bpe_dir / "vocab.json", bpe_dir / "merges.txt")
    ids: list[int] = []
    for line in lines:
        ids += bpe.encode(line + "\n")
    input_ids = _blocks(ids, seq_length, max_rows)
    targets = np.zeros_like(input_ids)
    targets[:, :-1] = input_ids[:, 1:]
    weights = np.ones(input_ids.shape, np.float32)
    weights[:, -1] = 0.0  # the last token of a block has no target in it
    return Heldout("gpt", {"input_ids": input_ids, "target_ids": targets,
                           "loss_weights": weights})


def _bert_params(path: pathlib.Path) -> tuple[Any, Any]:
    """(config, params) of a bertjax workdir checkpoint or a transformers BertForMaskedLM."""
    import flax.linen as nn  # noqa: PLC0415
    import jax  # noqa: PLC0415

    from bertjax.convert import hf_bert  # noqa: PLC0415
    from bertjax.objectives.pretraining import bert_pretraining  # noqa: PLC0415

    if not (path / "config.json").is_file():
        return _bertjax_params(path, "bert")
    config = hf_bert.load_hf_config(path)
    objective = bert_pretraining(config, use_nsp=False)
    initial = objective.init_variables(jax.random.key(0), objective.example_batch(1, 8))
    params, report = hf_bert.fill_pretrained(hf_bert.load_hf_state_dict(path),
                                             initial["params"])
    kept = [p for p in report.missing if "pooler" not in p and "nsp" not in p.lower()]
    if kept or report.unexpected:
        raise ValueError(f"{path}: the MLM model did not load whole (kept {kept[:3]}, "
                         f"ignored {report.unexpected[:3]}): the import no longer fits")
    return config, nn.unbox(params)


def _bertjax_params(path: pathlib.Path, family: str) -> tuple[Any, Any]:
    from bertjax.training import workdir as workdir_lib  # noqa: PLC0415
    from bertjax.training.checkpoint import restore_saved_params  # noqa: PLC0415

    params, workdir, _ = restore_saved_params(path, best=False)
    record = workdir_lib.expect_family(workdir, family, "benchmarks/time_to_quality.py")
    return workdir_lib.model_config(record), params


def _gpt_params(path: pathlib.Path) -> tuple[Any, Any]:
    from bertjax.convert import hf_gpt  # noqa: PLC0415

    if (path / "config.json").is_file():
        return hf_gpt.load_hf_gpt(path)
    return _bertjax_params(path, "gpt")


_JITTED: dict[str, Any] = {}


def _jitted_sums(objective: Any, key: str) -> Any:
    """One jitted loss per model config, so checkpoints of one row compile it once."""
    import jax  # noqa: PLC0415

    if key not in _JITTED:
        _JITTED[key] = jax.jit(lambda p, b: objective.loss_fn.sums(p, b, None))
    return _JITTED[key]


def score(path: str | pathlib.Path, heldout: Heldout, batch_size: int = 32
          ) -> tuple[float, float, float]:
    """(held-out loss, accuracy, seconds) of one checkpoint directory of either side."""
    from bertjax.objectives.lm import gpt_pretraining  # noqa: PLC0415
    from bertjax.objectives.pretraining import bert_pretraining  # noqa: PLC0415

    begin = time.perf_counter()
    path = pathlib.Path(path)
    if heldout.family == "bert":
        config, params = _bert_params(path)
        objective, key = bert_pretraining(config, use_nsp=False), "mlm"
    else:
        config, params = _gpt_params(path)
        objective, key = gpt_pretraining(config), "lm"
    sums = _jitted_sums(objective, repr(config))
    loss = accuracy = weight = 0.0
    for batch in heldout.batches(batch_size):
        metrics = sums(params, batch)
        loss += float(metrics[f"{key}_loss"].total)
        accuracy += float(metrics[f"{key}_accuracy"].total)
        weight += float(metrics[f"{key}_loss"].weight)
    return loss / weight, accuracy / weight, time.perf_counter() - begin
