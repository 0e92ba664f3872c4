"""Has a pretrained model left the unigram stage? Its own objective scored on held-out text,
next to the unigram model of its training text scored on the same targets, for every family.

    score = held_out("workdir/gpt", "gpt", "heldout.txt", "pretrain.txt")
    score.accuracy, score.unigram_accuracy      # top-1 on the held-out targets
    score.loss, score.unigram_loss              # mean cross-entropy, nats per target

The targets are each family's own: BERT's masked positions (15%, 80/10/10, as in training:
bertjax.inference.fill_mask builds them), GPT's next tokens over the held-out documents joined
by <|endoftext|>, ELMo's next and previous words of each held-out sentence (both directions
averaged). The unigram model is the training text's token (word) frequencies, tokenized the
way the run tokenized it, add-one smoothed: its accuracy is that of always guessing the most
frequent token, its loss what a model that ignores context at best achieves. Both predict
over the tokenizer's vocabulary, never the token table's rows past it
(layers/embeddings.vocabulary_logits). Numbers are comparable within a family (the same
targets), not across families (different tokenizers and targets).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bertjax.data.source import load_documents
from bertjax.finetune.pretrained import load_pretrained
from bertjax.inference.elmo import ElmoEmbedder
from bertjax.inference.fill_mask import MaskFiller, count_tokens
from bertjax.layers.embeddings import vocabulary_logits
from bertjax.models import gpt as gpt_model
from bertjax.models.bert import BertForPreTraining
from bertjax.models.elmo import ElmoBiLM
from bertjax.objectives.bilm import sentence_targets
from bertjax.tokenizers.elmo_vocab import BOS, EOS, sentence_char_ids, tokenize
from bertjax.training import families

UNIGRAM_TOKENS = 2_000_000  # training tokens counted for the unigram model, at most
BATCH = 32  # rows (BERT instances, GPT windows, ELMo sentences) per held-out batch
MAX_WORDS = 64  # ELMo: longer held-out sentences are cut


@dataclasses.dataclass(frozen=True)
class HeldOutScore:
    """A model and the unigram model of its training text on the same held-out targets."""

    family: str
    target: str  # what is predicted, in words
    targets: int
    accuracy: float
    loss: float
    unigram_accuracy: float
    unigram_loss: float
    unigram_token: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Unigram:
    """Add-one smoothed token frequencies of a training text over a vocabulary of `size`."""

    def __init__(self, counts: collections.Counter, size: int):
        total = sum(counts.values()) + size
        self.log_probs = np.full(size, math.log(1 / total))
        for token, count in counts.items():
            self.log_probs[token] = math.log((count + 1) / total)
        self.top = int(np.argmax(self.log_probs))

    def score(self, targets: np.ndarray) -> tuple[float, float]:
        """(accuracy of always guessing the top token, mean cross-entropy) on target ids."""
        return float(np.mean(targets == self.top)), float(-np.mean(self.log_probs[targets]))


def _sentences(corpus: str) -> Iterator[str]:
    return (s for document in load_documents(corpus) for s in document)


@families.provides("bert", "held_out")
def _bert(workdir: str, heldout: str, train: str, batches: int) -> HeldOutScore:
    filler = MaskFiller.from_workdir(workdir)
    model = BertForPreTraining(filler.config)
    params = nn.unbox(filler.params)
    size = filler.vocab.vocab_size

    @jax.jit
    def log_probs(batch: dict[str, Any]) -> Any:
        out = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                          batch["input_mask"], batch["masked_lm_positions"])
        logits = vocabulary_logits(out["mlm_logits"].astype(jnp.float32), size)
        return jax.nn.log_softmax(logits, axis=-1)

    unigram = Unigram(count_tokens(filler.vocab.encode, load_documents(train), UNIGRAM_TOKENS),
                      size)
    correct, nll, targets = 0.0, 0.0, []
    for batch in filler.held_out_batches(heldout, batches=batches, batch_size=BATCH):
        logp_BxPxV = np.asarray(log_probs(batch))
        ids, weights = batch["masked_lm_ids"], batch["masked_lm_weights"] > 0
        correct += float((logp_BxPxV.argmax(-1) == ids)[weights].sum())
        nll -= float(np.take_along_axis(logp_BxPxV, ids[..., None], -1)[..., 0][weights].sum())
        targets.append(ids[weights])
    gold = np.concatenate(targets)
    u_acc, u_loss = unigram.score(gold)
    return HeldOutScore("bert", "masked tokens", len(gold), correct / len(gold), nll / len(gold),
                        u_acc, u_loss, filler.vocab.tokens[unigram.top])


def _stream(bpe: Any, documents: Iterable[list[str]]) -> np.ndarray:
    """Token ids of the documents joined as GPT's training stream joins them."""
    ids: list[int] = []
    for document in documents:
        ids += bpe.encode(" ".join(document))
        if bpe.eos_id is not None:
            ids.append(bpe.eos_id)
    return np.asarray(ids, np.int32)


@families.provides("gpt", "held_out")
def _gpt(workdir: str, heldout: str, train: str, batches: int) -> HeldOutScore:
    model = load_pretrained(workdir, "gpt")
    lm, params = gpt_model.GptLM(model.config), nn.unbox(model.params)
    L = model.config.max_position_embeddings
    size = model.tokenizer.vocab_size

    @jax.jit
    def step(ids_BxL: Any, targets_BxL: Any) -> Any:
        logits = lm.apply({"params": params}, ids_BxL).astype(jnp.float32)
        logits = vocabulary_logits(logits, size)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets_BxL)
        return (logits.argmax(-1) == targets_BxL).sum(), nll.sum()

    stream = _stream(model.tokenizer, load_documents(heldout))
    rows = min((len(stream) - 1) // L, batches * BATCH)
    inputs = stream[:rows * L].reshape(rows, L)
    gold = stream[1:rows * L + 1].reshape(rows, L)
    correct = nll = 0.0
    for start in range(0, rows, BATCH):
        c, n = step(inputs[start:start + BATCH], gold[start:start + BATCH])
        correct, nll = correct + float(c), nll + float(n)
    counts = collections.Counter(_stream(model.tokenizer, itertools.islice(
        load_documents(train), UNIGRAM_TOKENS // 50)).tolist())
    unigram = Unigram(counts, size)
    u_acc, u_loss = unigram.score(gold.ravel())
    top = model.tokenizer.decode([unigram.top])
    return HeldOutScore("gpt", "next tokens", gold.size, correct / gold.size, nll / gold.size,
                        u_acc, u_loss, top)


@families.provides("elmo", "held_out")
def _elmo(workdir: str, heldout: str, train: str, batches: int) -> HeldOutScore:
    embedder = ElmoEmbedder.from_workdir(workdir)
    config, vocab, words = embedder.config, embedder.vocab, embedder.tokenizer
    bilm, params = ElmoBiLM(config), embedder.params

    @jax.jit
    def step(token_ids: Any, char_ids: Any, lengths: Any) -> Any:
        out = bilm.apply({"params": params}, token_ids, char_ids, lengths, True)
        h_2xBxTxP = jnp.stack([out["forward"][-1], out["backward"][-1]])
        w_VxP, b_V = params["softmax_kernel"], params["softmax_bias"]
        logits = vocabulary_logits(jnp.einsum("dbtp,vp->dbtv", h_2xBxTxP, w_VxP) + b_V,
                                   vocab.vocab_size)
        targets, weights = sentence_targets(token_ids, lengths)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        hits = (logits.argmax(-1) == targets) * weights
        return hits.sum(), (nll * weights).sum(), weights.sum()

    sentences = [tokenize(s, words)[:MAX_WORDS - 2] for s in _sentences(heldout)]
    sentences = [s for s in sentences if s][:batches * BATCH]
    correct = nll = count = 0.0
    gold = []
    for start in range(0, len(sentences), BATCH):
        chunk = sentences[start:start + BATCH]
        T = max(len(s) for s in chunk) + 2
        ids = np.zeros((BATCH, T), np.int32)
        chars = np.zeros((BATCH, T, config.max_chars), np.int32)
        lengths = np.zeros((BATCH,), np.int32)
        for b, s in enumerate(chunk):
            ids[b, :len(s) + 2] = vocab.token_ids([BOS, *s, EOS])
            chars[b, :len(s) + 2] = sentence_char_ids(s, config.max_chars)
            lengths[b] = len(s) + 2
            gold += [*ids[b, 1:len(s) + 2], *ids[b, :len(s) + 1]]  # next, then previous words
        c, n, w = step(ids, chars, lengths)
        correct, nll, count = correct + float(c), nll + float(n), count + float(w)
    counts = collections.Counter(
        i for s in itertools.islice(_sentences(train), UNIGRAM_TOKENS // 20)
        for i in vocab.token_ids([*tokenize(s, words), EOS]).tolist())
    unigram = Unigram(counts, vocab.vocab_size)
    u_acc, u_loss = unigram.score(np.asarray(gold))
    return HeldOutScore("elmo", "next and previous words", int(count), correct / count,
                        nll / count, u_acc, u_loss, vocab.tokens[unigram.top])


def held_out(workdir: str, family: str, heldout: str, train: str,
             batches: int = 64) -> HeldOutScore:
    """The model in `workdir` (a bertjax pretraining run of `family`) on at most `batches`
    batches of 32 rows of the corpus `heldout` (BERT instances, GPT windows as long as its
    positions, ELMo sentences), with the unigram model of corpus `train` (corpus settings:
    paths, 'stdlib', ...)."""
    scorers = families.pieces("held_out")
    if family not in scorers:
        raise ValueError(f"no held-out score for family {family!r}: choose "
                         f"{families.choices('held_out')}")
    return scorers[family](workdir, heldout, train, batches)


__all__: Sequence[str] = ("HeldOutScore", "Unigram", "held_out")
