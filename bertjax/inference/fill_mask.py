"""What a pretrained BERT has learned, in a form a person recognises: fill in masked words, and
measure masked-LM accuracy on text the model never saw.

    filler = MaskFiller.from_workdir("workdir/bert_tiny_cpu")
    filler.fill("The [MASK] module provides functions for regular expressions .")
        -> [[("re", 0.31), ("string", 0.08), ("os", 0.05)]]      # top-k per [MASK]
    filler.held_out_accuracy("stdlib:held_out")                  # masked-LM accuracy
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from typing import Any

import flax.linen as nn
import jax
import numpy as np

from bertjax.convert.hf_bert import param_template
from bertjax.data.bert.source import BertPretrainingSource
from bertjax.models.bert import BertConfig, BertForPreTraining
from bertjax.objectives.pretraining import bert_pretraining
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.training import workdir as workdir_lib
from bertjax.training.checkpoint import load_trained

MASK = "[MASK]"


@dataclasses.dataclass
class MaskFiller:
    """A BERT with its MLM head and its WordPiece vocabulary."""

    config: BertConfig
    params: Any
    vocab: WordPieceVocabulary
    source: pathlib.Path | None = None  # the workdir, whose vocabulary held-out text uses

    def __post_init__(self) -> None:
        model = BertForPreTraining(self.config)

        def mlm_probs(params: Any, ids: Any, segments: Any, mask: Any, positions: Any) -> Any:
            logits = model.apply({"params": params}, ids, segments, mask, positions)
            return jax.nn.softmax(logits["mlm_logits"].astype("float32"), axis=-1)

        self._probs = jax.jit(mlm_probs)

    @classmethod
    def from_workdir(cls, path: str | pathlib.Path) -> MaskFiller:
        """The newest readable checkpoint of a BERT pretraining workdir."""
        trained = load_trained(path, "bert", "bertjax-fill-mask",
                               lambda config: nn.unbox(param_template(config, heads=True)),
                               remat=False)
        tokenizer = trained.record["tokenizer"]
        vocab = WordPieceVocabulary(workdir_lib.tokenizer_file(trained.workdir, trained.record,
                                                               "vocab"),
                                    lower_case=tokenizer.get("lower_case", True))
        return cls(trained.config, trained.params, vocab, trained.workdir)

    def fill(self, text: str, top_k: int = 3) -> list[list[tuple[str, float]]]:
        """For each [MASK] of `text`, the `top_k` most likely tokens with their probabilities."""
        pieces = [vocab_ids for part in text.split(MASK) for vocab_ids in
                  (self.vocab.encode(part), [self.vocab.mask_id])][:-1]
        ids = [self.vocab.cls_id, *(i for p in pieces for i in p), self.vocab.sep_id]
        positions = [n for n, i in enumerate(ids) if i == self.vocab.mask_id]
        if not positions:
            raise ValueError(f"no {MASK} in {text!r}: put {MASK} where a word should be filled")
        L = max(8, 1 << (len(ids) - 1).bit_length())
        if L > self.config.max_position_embeddings:
            raise ValueError(f"{len(ids)} tokens exceed the model's "
                             f"{self.config.max_position_embeddings} positions: shorten the text")
        row = np.zeros((1, L), np.int32)
        row[0, :len(ids)] = ids
        mask = (row > 0).astype(np.int32)
        probs = np.asarray(self._probs(self.params, row, np.zeros_like(row), mask,
                                       np.asarray([positions], np.int32)))[0]
        tokens = self.vocab.tokens
        return [[(tokens[i], float(p[i])) for i in np.argsort(-p)[:top_k]] for p in probs]

    def held_out_accuracy(self, corpus: str, batches: int = 20, batch_size: int = 32,
                          seed: int = 1) -> tuple[float, int]:
        """(masked-LM accuracy, masked tokens counted) on pretraining examples of `corpus`,
        made with this model's vocabulary and the paper's 15% / 80-10-10 masking."""
        length = min(128, self.config.max_position_embeddings)
        source = BertPretrainingSource(corpus=corpus, vocab=str(self.source), seed=seed)
        with tempfile.TemporaryDirectory() as scratch:
            source.prepare(scratch)
        loss = jax.jit(bert_pretraining(self.config, use_nsp=False).loss_fn)
        correct = total = 0.0
        for _, batch in zip(range(batches), source.batches(0, length, batch_size), strict=False):
            _, metrics = loss(self.params, batch, None)
            weight = float(batch["masked_lm_weights"].sum())
            correct += float(metrics["mlm_accuracy"]) * weight
            total += weight
        return correct / max(total, 1.0), int(total)
