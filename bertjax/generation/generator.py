"""The Python API: a GPT with its tokenizer that continues prompts and scores continuations.

    gen = Generator.from_checkpoint("workdir/gpt_tiny_cpu")
    gen.generate(["The module", "A"], max_new_tokens=40, temperature=0.8, top_k=40, seed=1)
    gen.score("The capital of France is", [" Paris", " Rome"])   # log-likelihoods

Stop strings end a continuation: the text is cut where the first one begins, inside a token
if need be (stop "." keeps " etc" of a token " etc."); a stop string that some vocabulary
tokens contain also ends the decode loop early for that row, after the first such token.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import jax
import numpy as np

from bertjax.generation import scoring
from bertjax.generation.decode import check_fits, generate_ids, left_pad
from bertjax.generation.sampling import GenerationError, Sampling
from bertjax.models.gpt import GptConfig, GptLM, abstract_params
from bertjax.tokenizers.bpe import END_OF_TEXT, ByteLevelBPE
from bertjax.training.checkpoint import TrainedModel, load_trained
from bertjax.training.workdir import tokenizer_file
from bertjax.typing import Params

PROMPT_BUCKET = 32  # prompts are left-padded to a multiple of this: fewer recompilations


@dataclasses.dataclass
class Generator:
    """A GPT language model, its parameters and its byte-level BPE tokenizer."""

    config: GptConfig
    params: Params
    tokenizer: ByteLevelBPE
    max_tokens: int = 16384  # prompt + new tokens, summed over a batch's rows

    def __post_init__(self) -> None:
        if self.tokenizer.vocab_size > self.config.vocab_size:
            raise GenerationError(
                f"the tokenizer ({self.tokenizer.source}) has {self.tokenizer.vocab_size} tokens "
                f"but the model's vocabulary has {self.config.vocab_size}: pass the vocab.json "
                "and merges.txt the model was trained with"
            )
        self.model = GptLM(self.config)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, vocab: str | None = None,
                        merges: str | None = None, dtype: str | None = None) -> Generator:
        """The newest checkpoint of a GPT workdir (or the one named), with the run's tokenizer
        or the given vocab.json + merges.txt (which must fit the run's vocabulary)."""
        if (vocab is None) != (merges is None):
            raise GenerationError("pass both --vocab and --merges, or neither to use the run's")
        ckpt = load_gpt(path, dtype=dtype)
        info = ckpt.record.get("tokenizer", {})
        if vocab is None:
            vocab = str(tokenizer_file(ckpt.workdir, ckpt.record, "vocab"))
            merges = str(tokenizer_file(ckpt.workdir, ckpt.record, "merges"))
        tokenizer = ByteLevelBPE.from_files(vocab, merges)
        trained = info.get("vocab_size")
        if trained is not None and tokenizer.vocab_size != trained:
            raise GenerationError(
                f"{vocab} has {tokenizer.vocab_size} tokens but {ckpt.workdir} was trained with "
                f"a {trained}-token vocabulary: pass the run's own vocab.json and merges.txt "
                f"({ckpt.workdir / 'vocab.json'})"
            )
        return cls(ckpt.config, ckpt.params, tokenizer)

    # ---- generation
    def stop_ids(self, stop: Sequence[str]) -> tuple[int, ...]:
        """Ids of the tokens whose text contains one of the stop strings."""
        ids = {self.tokenizer.vocab[s] for s in stop if s in self.tokenizer.special_tokens}
        plain = [s.encode("utf-8") for s in stop if s not in self.tokenizer.special_tokens]
        for i in range(self.tokenizer.vocab_size):
            if self.tokenizer.tokens[i] in self.tokenizer.special_tokens:
                continue
            text = self.tokenizer.decode_bytes([i])
            if any(s in text for s in plain):
                ids.add(i)
        return tuple(sorted(ids))

    def generate_tokens(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 64,
                        sampling: Sampling | None = None, seed: int = 0,
                        stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """New token ids for each prompt (token lists), cut before the first stop token.
        `sampling` defaults to plain sampling at temperature 1. Prompt k samples with its own
        key, fold_in(key(seed), k), as `generate` says."""
        rows = self._generate_rows(prompts, max_new_tokens, sampling, seed, stop_ids)
        return [row[:-1] if row and row[-1] in stop_ids else row for row in rows]

    def _generate_rows(self, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                       sampling: Sampling | None, seed: int, stop_ids: Sequence[int]
                       ) -> list[list[int]]:
        """New token ids for each prompt up to and with its first stop token: the text before
        a stop string inside that token is still part of the continuation."""
        sampling = Sampling() if sampling is None else sampling
        check_fits([len(p) for p in prompts], max_new_tokens, self.config.max_position_embeddings)
        results: list[list[int]] = [[] for _ in prompts]
        for rows in self._batches([len(p) for p in prompts], max_new_tokens):
            chunk = [prompts[r] for r in rows]
            longest = max(len(p) for p in chunk)
            pad_id = self.tokenizer.eos_id or 0
            ids, mask = left_pad(chunk, pad_id, -(-longest // PROMPT_BUCKET) * PROMPT_BUCKET)
            out = generate_ids(self.params, ids, mask, jax.random.key(seed), model=self.model,
                               max_new_tokens=max_new_tokens, sampling=sampling,
                               stop_ids=tuple(stop_ids), pad_id=pad_id,
                               vocab_limit=self.tokenizer.vocab_size,
                               row_ids_B=np.asarray(rows, dtype=np.int32))
            for r, row in zip(rows, np.asarray(out).tolist(), strict=True):
                stop = next((j for j, t in enumerate(row) if t in stop_ids), len(row) - 1)
                results[r] = row[:stop + 1]
        return results

    def _batches(self, lengths: Sequence[int], max_new_tokens: int) -> list[list[int]]:
        """Prompt indices grouped by length so that each batch's rows times its (bucketed)
        prompt and new tokens stay within `max_tokens`: memory is bounded however many prompts
        come. Each row keeps its own key (its index), so grouping does not change any output."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches, current = [], []
        for i in order:
            width = -(-lengths[i] // PROMPT_BUCKET) * PROMPT_BUCKET + max_new_tokens
            if current and (len(current) + 1) * width > self.max_tokens:
                batches.append(current)
                current = []
            current.append(i)
        return batches + [current] if current else batches

    def generate(self, prompts: str | Sequence[str], max_new_tokens: int = 64,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int = 0, stop: Sequence[str] = (END_OF_TEXT,)) -> list[str]:
        """Continuations of each prompt; temperature 0 is greedy decoding.

        Prompt k (its index in `prompts`) samples with its own key, fold_in(key(seed), k), so
        its continuation depends only on (seed, k, the prompt, the settings): not on the other
        prompts, their lengths or how many there are. The same prompt at two indices gets two
        independent samples; greedy continuations depend on the prompt alone.
        """
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        if not prompts:
            return []
        sampling = Sampling(temperature, top_k, top_p)
        eos = self.tokenizer.eos_id
        encoded = [self.tokenizer.encode(p) or ([eos] if eos is not None else []) for p in prompts]
        rows = self._generate_rows(encoded, max_new_tokens, sampling, seed, self.stop_ids(stop))
        return [_cut(self.tokenizer.decode(row), stop) for row in rows]

    # ---- scoring
    def score(self, context: str, candidates: Sequence[str]) -> np.ndarray:
        """Log-likelihood of each candidate continuation of `context` (summed over tokens)."""
        ctx = self.tokenizer.encode(context)
        cands = [self.tokenizer.encode(c) for c in candidates]
        return scoring.continuation_logprobs(self.model, self.params, ctx, cands,
                                             self.tokenizer.vocab_size).sum(-1)


def load_gpt(path: str | os.PathLike, tool: str = "bertjax-generate",
             dtype: str | None = None) -> TrainedModel:
    """The parameters of a GPT workdir's newest (or named) checkpoint, for inference: no
    rematerialisation, and optionally another compute dtype."""
    overrides = {"remat": False, **({"dtype": dtype} if dtype else {})}
    return load_trained(path, "gpt", tool, abstract_params, **overrides)


def _cut(text: str, stop: Sequence[str]) -> str:
    """Text before the first occurrence of any stop string."""
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[:min(cuts)] if cuts else text
