"""Embed text with a trained biLM: all K = L + 1 ELMo layers per token, or a ScalarMix of them.

    embedder = ElmoEmbedder.from_workdir("workdir/elmo_tiny_cpu")     # a bertjax-train run
    embedder = ElmoEmbedder.from_hdf5("options.json", "weights.hdf5") # bilm-tf / AllenNLP files
    layers = embedder.embed(["The bank of the river .", "A bank loan ."])  # [K, n, 2P] each
    mixed = embedder.embed_mixed(sentences, weights=[0.2, 0.3, 0.5])      # [n, 2P] each

Each sentence is run inside <S> ... </S> (removed from the output) with no LSTM state from
other sentences, and the backward LSTMs read its own tokens reversed, so a sentence gets the
same vectors alone, in any batch, and however often it is embedded. Batches hold at most
`max_tokens` padded tokens (lengths and row counts are powers of two, so few shapes are ever
compiled); a sentence longer than `window` tokens streams through the biLM in windows with the
LSTM state carried along, so memory does not grow with its length.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax import files
from bertjax.convert.elmo_hdf5 import load_bilm_hdf5, word_tokenizer_of
from bertjax.models import elmo
from bertjax.models.elmo import ElmoBiLM, ElmoConfig, layer_states, zero_carry
from bertjax.tokenizers.elmo_vocab import BOS, EOS, ElmoVocabulary, sentence_char_ids, tokenize
from bertjax.training.checkpoint import load_trained
from bertjax.training.workdir import tokenizer_file
from bertjax.typing import Params

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

    def __init__(self, config: ElmoConfig, params: Params, vocab: ElmoVocabulary | None = None,
                 tokenizer: str = "whitespace", batch_size: int = 32, max_tokens: int = 4096,
                 window: int = 256):
        if config.token_encoder == "word" and vocab is None:
            raise EmbedError("a word-encoder ELMo needs its vocabulary: pass --vocab")
        if min(batch_size, max_tokens, window) < 1:
            raise EmbedError("batch_size, max_tokens and window must be positive")
        self.config, self.vocab, self.tokenizer = config, vocab, tokenizer
        self.batch_size, self.max_tokens, self.window = batch_size, max_tokens, window
        self.params = jax.tree.map(jnp.asarray, params)
        self.model = ElmoBiLM(config)

        def representations(params: Params, token_ids: jax.Array | None,
                            char_ids: jax.Array | None, lengths: jax.Array
                            ) -> tuple[jax.Array, jax.Array]:
            out = self.model.apply({"params": params}, token_ids, char_ids, lengths, True)
            return layer_states(out), out["token"]

        def stream_window(params: Params, forward: tuple, backward: tuple, carry: dict
                          ) -> tuple[jax.Array, list[jax.Array], list[jax.Array], dict]:
            token = self.model.apply({"params": params}, *forward, method=ElmoBiLM.embed_tokens)
            out = self.model.apply({"params": params}, forward, backward, carry, True,
                                   method=ElmoBiLM.stream)
            return token, out["forward"], out["backward"], out["carry"]

        self._forward = jax.jit(representations)
        self._window = jax.jit(stream_window)

    @classmethod
    def from_workdir(cls, path: str | pathlib.Path, vocab: str | None = None,
                     **options: Any) -> ElmoEmbedder:
        """From a bertjax-train ELMo workdir (newest checkpoint) or one checkpoint step dir,
        local or on gs://."""
        path = files.as_path(path)
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
        return cls(config, params, vocabulary, word_tokenizer, **options)

    @classmethod
    def from_hdf5(cls, options: str | pathlib.Path, weights: str | pathlib.Path,
                  vocab: str | None = None, tokenizer: str | None = None, **sizes: Any
                  ) -> ElmoEmbedder:
        """From bilm-tf / AllenNLP options JSON + weights HDF5 (vocabulary optional); text is
        split into words by `tokenizer`, else as the options say (bertjax's export records its
        run's; whitespace for bilm-tf's files)."""
        config, params = load_bilm_hdf5(options, weights)
        tokenizer = tokenizer or word_tokenizer_of(options)
        vocabulary = None
        if vocab is not None:
            vocabulary = ElmoVocabulary(vocab)
            if config.vocab_size > 1:  # the file has a softmax: the vocabulary must fit it
                _check_vocab(vocabulary, config, None)
        return cls(config, params, vocabulary, tokenizer, **sizes)

    def tokens(self, sentence: Sentence) -> list[str]:
        return tokenize(sentence, self.tokenizer) if isinstance(sentence, str) else list(sentence)

    def _ids(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Word ids [n + 2] (zeros without a vocabulary) and char ids [n + 2, C] of <S> .. </S>."""
        chars = sentence_char_ids(tokens, self.config.max_chars)
        if self.vocab is None:
            return np.zeros(len(chars), np.int32), chars
        return self.vocab.token_ids([BOS, *tokens, EOS]), chars

    def _batch(self, token_lists: list[list[str]], rows: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        longest = max(len(t) for t in token_lists) + 2
        T = max(8, 1 << (longest - 1).bit_length())  # power-of-two length buckets
        B, C = rows, self.config.max_chars
        token_ids, char_ids = np.zeros((B, T), np.int32), np.zeros((B, T, C), np.int32)
        lengths = np.zeros((B,), np.int32)
        for b, tokens in enumerate(token_lists):
            n = len(tokens) + 2
            lengths[b] = n
            token_ids[b, :n], char_ids[b, :n] = self._ids(tokens)
        return token_ids, char_ids, lengths

    def _rows(self, length: int) -> int:
        """Rows of a batch of sentences padded to `length`: within the token budget (at least
        one), at most batch_size, a power of two (few shapes to compile)."""
        rows = max(1, min(self.batch_size, self.max_tokens // max(8, length)))
        return 1 << (rows.bit_length() - 1)

    def _stream(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """One long sentence in windows of `window` tokens, the LSTM state carried from each
        window to the next: the forward LSTMs read the sentence, the backward ones the sentence
        reversed, so memory does not grow with its length and the result equals `_forward`'s."""
        ids, chars = self._ids(tokens)
        W, n = self.window, len(ids)
        windows = -(-n // W)

        def pieces(a: np.ndarray) -> list[np.ndarray]:
            padded = np.zeros((windows * W, *a.shape[1:]), a.dtype)
            padded[:n] = a
            return [padded[None, k * W:(k + 1) * W] for k in range(windows)]

        zero = zero_carry(self.config, 1)
        carry = {"c": jnp.asarray(zero["c"]), "h": jnp.asarray(zero["h"])}
        forward_in = zip(pieces(ids), pieces(chars), strict=True)
        backward_in = zip(pieces(ids[::-1]), pieces(chars[::-1]), strict=True)
        tokens_out, fwd, bwd = [], [], []
        for f, b in zip(forward_in, backward_in, strict=True):
            token, f_layers, b_layers, carry = jax.device_get(
                self._window(self.params, f, b, carry))
            tokens_out.append(token[0])
            fwd.append(np.stack([y[0] for y in f_layers]))
            bwd.append(np.stack([y[0] for y in b_layers]))
        x = np.concatenate(tokens_out)[:n]  # [n, P]
        forward = np.concatenate(fwd, axis=1)[:, :n]  # [L, n, P]
        backward = np.concatenate(bwd, axis=1)[:, :n][:, ::-1]  # back in sentence order
        layers = np.concatenate([np.concatenate([x, x], axis=-1)[None],
                                 np.concatenate([forward, backward], axis=-1)])
        return layers[:, 1:-1], x[1:-1]

    def _run(self, sentences: Sequence[Sentence]) -> list[tuple[np.ndarray, np.ndarray]]:
        token_lists = [self.tokens(s) for s in sentences]
        for i, tokens in enumerate(token_lists):
            if not tokens:
                raise EmbedError(f"sentence {i} is empty: ELMo needs at least one token per "
                                 "sentence; drop empty sentences")
        results: list[Any] = [None] * len(token_lists)
        short = []
        for i, tokens in enumerate(token_lists):
            if len(tokens) + 2 > self.window:
                results[i] = self._stream(tokens)
            else:
                short.append(i)
        short.sort(key=lambda i: len(token_lists[i]))
        start = 0
        while start < len(short):  # batches within the token budget, by increasing length
            rows = self._rows(len(token_lists[short[start]]) + 2)
            chunk = short[start:start + rows]
            while len(chunk) > 1 and self._rows(len(token_lists[chunk[-1]]) + 2) < len(chunk):
                chunk = chunk[:self._rows(len(token_lists[chunk[-1]]) + 2)]
            batch = self._batch([token_lists[i] for i in chunk], rows)
            layers, token = jax.device_get(self._forward(self.params, *batch))
            for b, i in enumerate(chunk):
                n = len(token_lists[i])
                results[i] = (layers[:, b, 1:n + 1], token[b, 1:n + 1])
            start += len(chunk)
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
