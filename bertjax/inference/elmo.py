"""Embed text with a trained biLM: all K = L + 1 ELMo layers per token, or a ScalarMix of them.

    embedder = ElmoEmbedder.from_workdir("workdir/elmo_tiny_cpu")     # a bertjax-train run
    embedder = ElmoEmbedder.from_hdf5("options.json", "weights.hdf5") # bilm-tf / AllenNLP files
    layers = embedder.embed(["The bank of the river .", "A bank loan ."])  # [K, n, 2P] each
    mixed = embedder.embed_mixed(sentences, weights=[0.2, 0.3, 0.5])      # [n, 2P] each

Each sentence is run inside <S> ... </S> (removed from the output) with no LSTM state from
other sentences, and the backward LSTMs read its own tokens reversed, so a sentence gets the
same vectors alone, in any batch, and however often it is embedded. Batches are padded to
power-of-two lengths and a fixed batch size, so few shapes are ever compiled.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.convert.elmo_hdf5 import load_bilm_hdf5
from bertjax.data.elmo_vocab import BOS, EOS, ElmoVocabulary, sentence_char_ids, tokenize
from bertjax.models import elmo
from bertjax.models.elmo import ElmoBiLM, ElmoConfig, layer_representations
from bertjax.training.checkpoint import load_trained
from bertjax.training.workdir import tokenizer_file

Sentence = str | Sequence[str]


class EmbedError(ValueError):
    """Inputs, checkpoints or vocabularies that cannot be embedded with; one actionable line."""


def _check_vocab(vocab: ElmoVocabulary, config: ElmoConfig, expected: Sequence[str] | None
                 ) -> None:
    """A vocabulary must be the one the checkpoint was trained with (or fit its softmax)."""
    if expected is not None and list(expected) != vocab.tokens:
        differ = next((i for i, (a, b) in enumerate(zip(expected, vocab.tokens, strict=False))
                       if a != b), min(len(expected), len(vocab.tokens)))
        raise EmbedError(f"vocabulary {vocab.path} ({len(vocab.tokens)} tokens) does not match "
                         f"the checkpoint's ({len(expected)} tokens; they differ at line "
                         f"{differ + 1}): pass the run's elmo_vocab.txt, or no vocabulary")
    if len(vocab.tokens) > config.vocab_size:
        raise EmbedError(f"vocabulary {vocab.path} has {len(vocab.tokens)} tokens but the "
                         f"checkpoint's softmax has {config.vocab_size}: pass the vocabulary the "
                         "model was trained with")


class ElmoEmbedder:
    """Deterministic, batch-independent ELMo embeddings from biLM parameters."""

    def __init__(self, config: ElmoConfig, params: Any, vocab: ElmoVocabulary | None = None,
                 tokenizer: str = "whitespace", batch_size: int = 32):
        if config.token_encoder == "word" and vocab is None:
            raise EmbedError("a word-encoder ELMo needs its vocabulary: pass --vocab")
        self.config, self.vocab, self.tokenizer = config, vocab, tokenizer
        self.batch_size = batch_size
        self.params = jax.tree.map(jnp.asarray, params)
        self.model = ElmoBiLM(config)

        def representations(params: Any, token_ids: Any, char_ids: Any, lengths: Any) -> Any:
            out = self.model.apply({"params": params}, token_ids, char_ids, lengths, True)
            return layer_representations(out), out["token"]

        self._forward = jax.jit(representations)

    @classmethod
    def from_workdir(cls, path: str | pathlib.Path, vocab: str | None = None,
                     batch_size: int = 32) -> ElmoEmbedder:
        """From a bertjax-train ELMo workdir (newest checkpoint) or one checkpoint step dir."""
        path = pathlib.Path(path)
        if not path.exists():
            raise EmbedError(f"checkpoint {path} does not exist: pass --checkpoint=WORKDIR of an "
                             "ELMo bertjax-train run")
        trained = load_trained(path, elmo.FAMILY, "bertjax-embed", elmo.abstract_params)
        config, params = trained.config, trained.params
        run_vocab = tokenizer_file(trained.workdir, trained.record, "vocab")
        expected = ElmoVocabulary(run_vocab).tokens if run_vocab.is_file() else None
        vocabulary = None
        if vocab is not None:
            vocabulary = ElmoVocabulary(vocab)
            _check_vocab(vocabulary, config, expected)
        elif expected is not None:
            vocabulary = ElmoVocabulary(run_vocab)
        word_tokenizer = trained.record["tokenizer"].get("word_tokenizer", "whitespace")
        return cls(config, params, vocabulary, word_tokenizer, batch_size)

    @classmethod
    def from_hdf5(cls, options: str | pathlib.Path, weights: str | pathlib.Path,
                  vocab: str | None = None, tokenizer: str = "whitespace", batch_size: int = 32
                  ) -> ElmoEmbedder:
        """From bilm-tf / AllenNLP options JSON + weights HDF5 (vocabulary optional)."""
        config, params = load_bilm_hdf5(options, weights)
        vocabulary = None
        if vocab is not None:
            vocabulary = ElmoVocabulary(vocab)
            if config.vocab_size > 1:  # the file has a softmax: the vocabulary must fit it
                _check_vocab(vocabulary, config, None)
        return cls(config, params, vocabulary, tokenizer, batch_size)

    def tokens(self, sentence: Sentence) -> list[str]:
        return tokenize(sentence, self.tokenizer) if isinstance(sentence, str) else list(sentence)

    def _batch(self, token_lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        longest = max(len(t) for t in token_lists) + 2
        T = max(8, 1 << (longest - 1).bit_length())  # power-of-two length buckets
        B, C = self.batch_size, self.config.max_chars
        token_ids, char_ids = np.zeros((B, T), np.int32), np.zeros((B, T, C), np.int32)
        lengths = np.zeros((B,), np.int32)
        for b, tokens in enumerate(token_lists):
            n = len(tokens) + 2
            lengths[b] = n
            char_ids[b, :n] = sentence_char_ids(tokens, C)
            if self.vocab is not None:
                token_ids[b, :n] = self.vocab.token_ids([BOS, *tokens, EOS])
        return token_ids, char_ids, lengths

    def _run(self, sentences: Sequence[Sentence]) -> list[tuple[np.ndarray, np.ndarray]]:
        token_lists = [self.tokens(s) for s in sentences]
        for i, tokens in enumerate(token_lists):
            if not tokens:
                raise EmbedError(f"sentence {i} is empty: ELMo needs at least one token per "
                                 "sentence; drop empty sentences")
        order = sorted(range(len(token_lists)), key=lambda i: len(token_lists[i]))
        results: list[Any] = [None] * len(token_lists)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            batch = self._batch([token_lists[i] for i in chunk])
            layers, token = jax.device_get(self._forward(self.params, *batch))
            for b, i in enumerate(chunk):
                n = len(token_lists[i])
                results[i] = (layers[:, b, 1:n + 1], token[b, 1:n + 1])
        return results

    def embed(self, sentences: Sequence[Sentence]) -> list[np.ndarray]:
        """Per sentence [K, n, 2P]: h_0 = [x; x] (static token vectors), h_j = [fwd_j; bwd_j]."""
        return [layers for layers, _ in self._run(sentences)]

    def token_vectors(self, sentences: Sequence[Sentence]) -> list[np.ndarray]:
        """Per sentence [n, P]: the context-free token encoder output x."""
        return [token for _, token in self._run(sentences)]

    def embed_mixed(self, sentences: Sequence[Sentence], weights: Sequence[float] | None = None,
                    gamma: float = 1.0) -> list[np.ndarray]:
        """Per sentence [n, 2P]: gamma * sum_j w_j h_j (default: the average of the K layers)."""
        K = self.config.num_representations
        w = np.full(K, 1.0 / K) if weights is None else np.asarray(weights, np.float64)
        if w.shape != (K,):
            raise EmbedError(f"{len(w)} mixing weights for {K} ELMo layers: give {K} weights")
        return [gamma * np.tensordot(w, layers, axes=1).astype(np.float32)
                for layers in self.embed(sentences)]
