"""One word in several sentences: its vector at every layer of a BERT, a GPT or an ELMo, compared.

    vectors = bert_word_vectors(config, params, vocab)          # "bank" in SENTENCES
    sims_KxNxN = similarity_matrices(vectors.vectors)     # cosine, one matrix per layer
    plot_similarities(vectors, "bank.png")                      # one panel per layer
    third_sense(sims_KxNxN[-1])                                 # is "blood bank" its own sense?

Layers, index 0 first (`WordVectors.layer_names`), as each family's `layer_states` numbers
them (`BertModel.layer_states`, `GptLM.layer_states`, `models.elmo.layer_states`):

- BERT: "token" (the word-piece embedding rows alone: static, identical in every sentence),
  "embeddings" (the encoder's input: word + position + segment embeddings, LayerNorm; *not*
  static, as "bank" sits at different positions), then "layer 1" ... "layer L". So index k + 1
  is Hugging Face's `hidden_states[k]`.
- GPT: "token" (the token embedding rows alone: static), then "layer 1" ... "layer L", the
  last one GPT's final hidden state (after the final LayerNorm of a pre-LN model). A causal
  model's vector of the word sees only the words before it.
- ELMo: "token" (the char-CNN or word-table output, context-free), then "lstm 1" ... "lstm L",
  each [forward; backward] (`ElmoEmbedder.embed`).

`sense_separation` puts one number on a layer: how much closer two occurrences of the same
sense are than two of different senses (0 for a static layer, where all are the same vector).

A word split into several pieces (BERT) is the mean of its pieces' vectors. The first
occurrence of the word in a sentence is used.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.analysis.plotting import heatmap_grid
from bertjax.inference.elmo import ElmoEmbedder
from bertjax.models.bert import BertConfig, BertModel
from bertjax.models.gpt import GptConfig, GptLM
from bertjax.tokenizers.bpe import ByteLevelBPE, pretokenize
from bertjax.tokenizers.elmo_vocab import tokenize
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.typing import Params

# The classic "bank" sentences: two money banks, two river banks, and a blood bank.
SENTENCES: tuple[str, ...] = (
    "Have you paid that money to the bank yet ?",
    "It is safest to deposit your money in the bank .",
    "The victim was found lying dead on the river bank .",
    "They stood on the river bank to fish.",
    "The hospital has its own blood bank.",
)
SENSES: tuple[str, ...] = ("money", "money", "river", "river", "blood")
WORD = "bank"


@dataclasses.dataclass(frozen=True)
class WordVectors:
    """`vectors[k, n]` ([K, N, E]): the word's vector at layer k (named `layer_names[k]`) in
    sentence n."""

    word: str
    sentences: tuple[str, ...]
    layer_names: tuple[str, ...]
    vectors: np.ndarray

    def similarities(self) -> np.ndarray:
        """Cosine similarities [K, N, N], one matrix per layer."""
        return similarity_matrices(self.vectors)


def similarity_matrices(vectors_KxNxE: np.ndarray) -> np.ndarray:
    """Cosine similarity between the N vectors at each of K layers: [K, N, N]."""
    v = np.asarray(vectors_KxNxE, np.float64)
    norms_KxNx1 = np.linalg.norm(v, axis=-1, keepdims=True)
    unit_KxNxE = v / np.maximum(norms_KxNx1, 1e-12)
    return np.einsum("kne,kme->knm", unit_KxNxE, unit_KxNxE)


def _word_piece_positions(vocab: WordPieceVocabulary, sentence: str, word: str
                          ) -> tuple[list[int], list[int]]:
    """(ids of the sentence, positions of the word's pieces among them)."""
    flags = re.IGNORECASE if vocab.lower_case else 0
    match = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", sentence, flags)
    if match is None:
        raise ValueError(f"{word!r} is not a word of the sentence {sentence!r}: pass sentences "
                         "that contain the word")
    ids, offsets = vocab.encode_with_offsets(sentence)
    positions = [i for i, (start, end) in enumerate(offsets)
                 if start >= match.start() and end <= match.end()]
    return ids, positions


def _padded(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and mask [N, T] of the rows, zero-padded to the longest."""
    ids_NxT = np.zeros((len(rows), max(map(len, rows))), np.int32)
    mask_NxT = np.zeros_like(ids_NxT)
    for n, row in enumerate(rows):
        ids_NxT[n, :len(row)], mask_NxT[n, :len(row)] = row, 1
    return ids_NxT, mask_NxT


def _word_means(states_KxNxTxE: np.ndarray, positions: Sequence[Sequence[int]]) -> np.ndarray:
    """[K, N, E]: at every layer k, sentence n's mean over the word's token positions[n]."""
    return np.stack([states_KxNxTxE[:, n, list(p)].mean(axis=1) for n, p in enumerate(positions)],
                    axis=1)


def bert_word_vectors(
    config: BertConfig,
    params: Params,
    vocab: WordPieceVocabulary,
    sentences: Sequence[str] = SENTENCES,
    word: str = WORD,
) -> WordVectors:
    """The word's vector in each sentence at the token embedding and every BERT layer."""
    encoded = [_word_piece_positions(vocab, s, word) for s in sentences]
    ids_NxT, mask_NxT = _padded([[vocab.cls_id, *ids, vocab.sep_id] for ids, _ in encoded])
    apply = jax.jit(lambda p, i, m: BertModel(config).apply(
        {"params": p}, i, None, m, method=BertModel.layer_states))
    states = apply(nn.unbox(params), jnp.asarray(ids_NxT), jnp.asarray(mask_NxT))
    states_KxNxTxE = np.stack([np.asarray(x) for x in states])
    # +1: the pieces sit after [CLS]
    vectors_KxNxE = _word_means(states_KxNxTxE, [[p + 1 for p in ps] for _, ps in encoded])
    names = ("token", "embeddings", *(f"layer {i}" for i in range(1, len(states_KxNxTxE) - 1)))
    return WordVectors(word, tuple(sentences), names, vectors_KxNxE)


def _bpe_positions(bpe: ByteLevelBPE, sentence: str, word: str) -> tuple[list[int], list[int]]:
    """(ids of the sentence, positions of the word's tokens among them): the first piece of
    GPT-2's pre-tokenization that is the word (its leading space aside, ignoring case)."""
    ids: list[int] = []
    positions: list[int] = []
    for piece in pretokenize(sentence):
        piece_ids = bpe.encode(piece)
        if not positions and piece.strip().lower() == word.lower():
            positions = list(range(len(ids), len(ids) + len(piece_ids)))
        ids += piece_ids
    if not positions:
        raise ValueError(f"{word!r} is not a word of the sentence {sentence!r}: pass sentences "
                         "that contain the word")
    return ids, positions


def gpt_word_vectors(
    config: GptConfig,
    params: Params,
    bpe: ByteLevelBPE,
    sentences: Sequence[str] = SENTENCES,
    word: str = WORD,
) -> WordVectors:
    """The word's vector in each sentence at the token embedding and every GPT layer (a word
    of several tokens: their mean)."""
    encoded = [_bpe_positions(bpe, s, word) for s in sentences]
    ids_NxT, mask_NxT = _padded([ids for ids, _ in encoded])
    apply = jax.jit(lambda p, i, m: GptLM(config).apply(
        {"params": p}, i, m, method=GptLM.layer_states))
    states = apply(nn.unbox(params), jnp.asarray(ids_NxT), jnp.asarray(mask_NxT))
    states_KxNxTxE = np.stack([np.asarray(x) for x in states])
    vectors_KxNxE = _word_means(states_KxNxTxE, [positions for _, positions in encoded])
    names = ("token", *(f"layer {i}" for i in range(1, len(states_KxNxTxE))))
    return WordVectors(word, tuple(sentences), names, vectors_KxNxE)


def elmo_word_vectors(
    embedder: ElmoEmbedder,
    sentences: Sequence[str] = SENTENCES,
    word: str = WORD,
    tokenizer: str = "simple",
) -> WordVectors:
    """The word's vector in each sentence at every ELMo layer (token layer, then each biLSTM).

    Sentences are split with `tokenizer` ("simple" keeps "bank." apart as "bank" "."), and the
    word is matched ignoring case.
    """
    token_lists = [tokenize(s, tokenizer) for s in sentences]
    positions = []
    for sentence, tokens in zip(sentences, token_lists, strict=True):
        lowered = [t.lower() for t in tokens]
        if word.lower() not in lowered:
            raise ValueError(f"{word!r} is not a token of the sentence {sentence!r} (tokens "
                             f"{tokens}): pass sentences that contain the word")
        positions.append(lowered.index(word.lower()))
    layers = embedder.embed(token_lists)  # per sentence [K, n, 2P]
    vectors_KxNxE = np.stack([x[:, p] for x, p in zip(layers, positions, strict=True)], axis=1)
    K = vectors_KxNxE.shape[0]
    names = ("token", *(f"lstm {i}" for i in range(1, K)))
    return WordVectors(word, tuple(sentences), names, vectors_KxNxE)


def sense_separation(similarities_KxNxN: np.ndarray, senses: Sequence[str]) -> np.ndarray:
    """Per layer [K]: the mean cosine between two occurrences of the same sense minus the mean
    cosine between two occurrences of different senses. 0 where every occurrence has one
    vector (a static layer); above 0 where the layer tells the senses apart."""
    sims = np.asarray(similarities_KxNxN, np.float64)
    labels = np.asarray(list(senses))
    if sims.shape[-2:] != (len(labels), len(labels)) or len(set(labels)) < 2:
        raise ValueError(f"{len(labels)} sense labels for {sims.shape} matrices: label every "
                         "sentence, with two senses or more")
    pairs = ~np.eye(len(labels), dtype=bool)
    same = (labels[:, None] == labels[None, :]) & pairs
    if not same.any():
        raise ValueError("no sense has two sentences: give two or more per sense")
    different = labels[:, None] != labels[None, :]
    return sims[:, same].mean(axis=-1) - sims[:, different].mean(axis=-1)


@dataclasses.dataclass(frozen=True)
class SenseVerdict:
    """Where the probe occurrence falls at one layer; see `third_sense`."""

    verdict: str  # a sense name, "apart" or "indistinct"
    to_sense: dict[str, float]  # mean cosine of the probe to each sense's occurrences
    within_sense: dict[str, float]  # mean cosine between two occurrences of the same sense


def third_sense(
    similarities_NxN: np.ndarray,
    senses: Sequence[str] = SENSES,
    probe: str = "blood",
    tolerance: float = 1e-4,
) -> SenseVerdict:
    """Is the `probe` occurrence (the blood bank) a sense of its own at this layer?

    From one layer's cosine matrix: `to_sense[s]` is the mean similarity of the probe to the
    occurrences of sense s, `within_sense[s]` the mean similarity between two different
    occurrences of s (each known sense needs two or more). The verdict is

    - "apart" when the probe is less similar to every sense than the least cohesive sense is
      to itself: max_s to_sense[s] < min_s within_sense[s]. A third sense;
    - otherwise the sense it is most similar to (e.g. "money" or "river");
    - "indistinct" when all these similarities agree within `tolerance` (a static layer,
      where every occurrence has the same vector).
    """
    sims = np.asarray(similarities_NxN, np.float64)
    senses = list(senses)
    if sims.shape != (len(senses), len(senses)) or senses.count(probe) != 1:
        raise ValueError(f"{len(senses)} sense labels for a {sims.shape} matrix, {probe!r} "
                         f"{senses.count(probe)} times: label each sentence, the probe once")
    p = senses.index(probe)
    to_sense, within = {}, {}
    for sense in dict.fromkeys(s for s in senses if s != probe):
        members = [i for i, s in enumerate(senses) if s == sense]
        if len(members) < 2:
            raise ValueError(f"sense {sense!r} has one sentence: give two or more per sense")
        to_sense[sense] = float(sims[p, members].mean())
        pairs = [sims[i, j] for i in members for j in members if i < j]
        within[sense] = float(np.mean(pairs))
    values = [*to_sense.values(), *within.values()]
    if max(values) - min(values) <= tolerance:
        verdict = "indistinct"
    elif max(to_sense.values()) < min(within.values()):
        verdict = "apart"
    else:
        verdict = max(to_sense, key=to_sense.get)
    return SenseVerdict(verdict, to_sense, within)


def _context(sentence: str, word: str, before: int = 3) -> str:
    """"w1 w2 w3 word": the words leading up to the first occurrence of `word`."""
    words = sentence.split()
    stripped = [re.sub(r"\W+$", "", w).lower() for w in words]
    if word.lower() not in stripped:
        return sentence
    i = stripped.index(word.lower())
    return " ".join(words[max(0, i - before):i] + [word])


def plot_similarities(
    vectors: WordVectors,
    path: str | os.PathLike,
    labels: Sequence[str] | None = None,
    columns: int = 4,
) -> pathlib.Path:
    """The per-layer cosine matrices as annotated heat maps (one panel per layer) in a PNG.

    Rows and columns are labelled `labels` (default: the word and the three words before it,
    such as "money in the bank"). One colour scale for all panels, spanning the data, so the
    contextual layers' differences show.
    """
    if labels is None:
        labels = [_context(s, vectors.word) for s in vectors.sentences]
    return heatmap_grid(
        vectors.similarities(),
        path,
        titles=list(vectors.layer_names),
        row_labels=labels,
        col_labels=labels,
        columns=columns,
        annotate=True,
        panel_inches=3.4,
        suptitle=f"cosine similarity of {vectors.word!r} across sentences, by layer",
    )
