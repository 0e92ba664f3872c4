"""ELMo's task model (Peters et al. 2018, sections 3.3 and 5.2) as an Objective for the loop.

    h_0..h_L = frozen biLM(<S> w_1 .. w_n </S>)            K = L + 1 layers [B, T, 2P]
    h_j      = h_j at w_1 .. w_n                           <S> and </S> stripped, as AllenNLP's
                                                           remove_sentence_boundaries: word k
                                                           at position k, n positions per row
    ELMo_k   = dropout(gamma * sum_j softmax(s)_j h_j)     a ScalarMix (or h_L: top_layer_only)
    x_k      = [word_embedding(w_k); ELMo_k]               the paper's [x_k; ELMo_k]: a
                                                           trainable embedding of the task's
                                                           words (word_embed_dim; 0 for none)
    h_k      = BiLSTM(x)_k                                 [B, T, 2H]
    h_k      = [h_k; ELMo'_k]                              placement "input_output" only: a
                                                           second, separate mix
    head     classify / regress: W maxpool_k(h_k)    pair_*: W [u; v; |u-v|; u*v]
             tag: W h_k for every token
    loss     = task loss + l2_coef * sum over mixes ||s||^2

The biLM's parameters sit under the top-level key "bilm" of the task's parameters, so a task
checkpoint holds everything it needs. They are frozen: the loss stops their gradients and the
optimizer must leave them alone (`make_optimizer(frozen=FROZEN)`: no update, no optimizer
state; without it AdamW's weight decay would still shrink them). The biLM always runs
deterministically, without its own dropout. A char-CNN biLM's softmax is not needed for
features: the task model keeps a one-row stand-in (vocab_size 1, as bilm-tf's weight files)
and `with_pretrained_bilm` copies every other biLM parameter.

Batch layout (the biLM's inputs count <S> and </S>: sentences are run as <S> w_1 .. w_n </S>,
padded to T; the task model's positions are the words', w_k at k - 1):
    char_ids      int32 [B, T, C]  char CNN biLMs (bertjax.tokenizers.elmo_vocab.sentence_char_ids)
    token_ids     int32 [B, T]     word-encoder biLMs: ids of the biLM's vocabulary
    word_ids      int32 [B, T]     the task's word embedding (word_embed_dim): ids of the task's
                                   own vocabulary (word_vocab_size rows), w_k at k - 1
    lengths       int32 [B]        n + 2
    *_b           the second sentence's char_ids_b / token_ids_b / word_ids_b / lengths_b
                                   (pair_* tasks)
    label         int32 [B]        classify, pair_classify;  float32 [B]: regress, pair_regress
    labels        int32 [B, T]     tag: w_k's tag at k - 1, with label_weights float32 [B, T]
                                   (0 past the words and on any word left out of the loss)

Training replaces each known word id by the unknown id (1) with probability word_dropout, so
the unknown word's row of the task embedding is trained: every training word is in the task
vocabulary, and without it every unseen dev word would read one untrained random vector.
"""

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.typing import VariableDict

from bertjax.finetune.heads.linear import linear_head
from bertjax.finetune.outputs import CLASSES, SCORE, WORD_CLASSES, Output
from bertjax.layers.bilstm import BiLstmEncoder, length_mask
from bertjax.layers.dropout import Dropout
from bertjax.layers.scalar_mix import ScalarMix, scalar_mix_penalty
from bertjax.layers.scalar_mix import mix_weights as scalar_mix_weights
from bertjax.models.elmo import ElmoBiLM, ElmoConfig, layer_states
from bertjax.objectives.objective import Mean, Metrics, Objective
from bertjax.typing import Params

Array = jax.Array
FROZEN = ("bilm",)  # make_optimizer(frozen=FROZEN)
UNKNOWN_WORD = 1  # the task vocabulary's id of a word training never saw (0 pads)
OUTPUTS = (CLASSES, SCORE, WORD_CLASSES)  # what a task model predicts
PAIRED = (CLASSES, SCORE)  # outputs whose task model also reads two sentences
PLACEMENTS = ("input", "input_output")
MIXES = ("input_mix", "output_mix")  # parameter names of the ScalarMixes


@dataclasses.dataclass(frozen=True)
class ElmoTaskSettings:
    """How the task model uses ELMo (the paper's ablations) and the size of its encoder."""

    placement: str = "input"  # "input", or "input_output": a second mix at the BiLSTM output
    top_layer_only: bool = False  # ablation: ELMo_k = h_L, no mix (Table 2, "Last Only")
    l2_coef: float = 0.001  # lambda on ||s||^2; the paper compares 1 and 0.001
    layer_norm: bool = False  # normalise each biLM layer before mixing (section 3.2)
    elmo_dropout: float = 0.5  # on ELMo_k, wherever it is placed
    word_embed_dim: int = 0  # trainable context-independent word vectors x_k; 0 for none
    word_vocab_size: int = 0  # rows of that table: the task's vocabulary (word_ids)
    word_dropout: float = 0.0  # training: a known word's id -> the unknown id (1), this often
    hidden_size: int = 256  # task BiLSTM units per direction
    num_layers: int = 1  # task BiLSTM layers
    dropout_rate: float = 0.2  # between BiLSTM layers and before the head

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown ELMo placement {self.placement!r}: set "
                             f"ElmoTaskSettings.placement to one of {', '.join(PLACEMENTS)}")
        if self.word_embed_dim and self.word_vocab_size < 1:
            raise ValueError("a task word embedding (word_embed_dim) needs word_vocab_size, "
                             "the size of the task's word vocabulary")


def task_bilm_config(config: ElmoConfig) -> ElmoConfig:
    """The biLM as the task model holds it: without its softmax unless words need the table."""
    if config.token_encoder == "char_cnn":
        return dataclasses.replace(config, vocab_size=1)
    return config


def max_pool(h_BxTxD: Array, mask_BxT: Array) -> Array:
    """[B, D] maximum over each row's real positions (zeros for a row without any)."""
    pooled_BxD = jnp.max(jnp.where(mask_BxT[..., None], h_BxTxD, -jnp.inf), axis=1)
    return jnp.where(mask_BxT.any(axis=1, keepdims=True), pooled_BxD, 0.0)


def strip_boundaries(layers_KxBxTxD: Array, lengths_B: Array) -> tuple[Array, Array]:
    """The biLM's layers at the words alone: <S> (position 0) dropped, so word k sits at k - 1,
    and </S> left past each row's n = lengths - 2 words (AllenNLP's
    remove_sentence_boundaries). The task model never reads the boundary tokens."""
    words_KxBxTxD = jnp.pad(layers_KxBxTxD[:, :, 1:], ((0, 0), (0, 0), (0, 1), (0, 0)))
    return words_KxBxTxD, jnp.maximum(lengths_B - 2, 0)


class ElmoTaskModel(nn.Module):
    """Frozen biLM -> ScalarMix(es) -> task BiLSTM -> head (see the module docstring)."""

    bilm_config: ElmoConfig
    output: Output  # one of OUTPUTS
    num_labels: int
    settings: ElmoTaskSettings
    pair: bool = False  # two sentences, each through the BiLSTM (PAIRED outputs)

    def setup(self) -> None:
        s, K = self.settings, self.bilm_config.num_representations
        self.bilm = ElmoBiLM(self.bilm_config)
        if not s.top_layer_only:
            self.input_mix = ScalarMix(K, layer_norm=s.layer_norm)
            if s.placement == "input_output":
                self.output_mix = ScalarMix(K, layer_norm=s.layer_norm)
        if s.word_embed_dim:
            self.word_embed = nn.Embed(s.word_vocab_size, s.word_embed_dim,
                                       embedding_init=nn.with_logical_partitioning(
                                           nn.initializers.normal(1.0), ("vocab", "embed")))
        self.encoder = BiLstmEncoder(s.hidden_size, s.num_layers, s.dropout_rate)
        self.elmo_dropout = Dropout(s.elmo_dropout)
        self.dropout = Dropout(s.dropout_rate)
        self.head = linear_head(self.num_labels)

    def elmo(self, mix: str, layers_KxBxTxD: Array, mask_BxT: Array, deterministic: bool
             ) -> Array:
        """ELMo_k [B, T, 2P] from the biLM layers with the named mix (or the top layer)."""
        if self.settings.top_layer_only:
            e_BxTxD = layers_KxBxTxD[-1]
        else:
            e_BxTxD = getattr(self, mix)(layers_KxBxTxD, mask_BxT)
        e_BxTxD = jnp.where(mask_BxT[..., None], e_BxTxD, 0.0)
        return self.elmo_dropout(e_BxTxD, deterministic=deterministic)

    def drop_words(self, word_ids_BxT: Array, deterministic: bool) -> Array:
        """Training: each known word (id > 1) becomes the unknown word (1) with probability
        word_dropout, so the unknown row learns what a word training never showed means."""
        rate = self.settings.word_dropout
        if deterministic or rate <= 0:
            return word_ids_BxT
        drop_BxT = jax.random.bernoulli(self.make_rng("dropout"), rate, word_ids_BxT.shape)
        return jnp.where(drop_BxT & (word_ids_BxT > UNKNOWN_WORD), UNKNOWN_WORD, word_ids_BxT)

    def encode(self, token_ids_BxT: Array | None, char_ids_BxTxC: Array | None,
               word_ids_BxT: Array | None, lengths_B: Array, deterministic: bool
               ) -> tuple[Array, Array]:
        """Task features [B, T, D] of one sentence per row, and its [B, T] token mask."""
        bilm_out = self.bilm(token_ids_BxT, char_ids_BxTxC, lengths_B, True)
        layers_KxBxTxD, words_B = strip_boundaries(layer_states(bilm_out), lengths_B)
        mask_BxT = length_mask(words_B, layers_KxBxTxD.shape[2])
        x_BxTxF = self.elmo("input_mix", layers_KxBxTxD, mask_BxT, deterministic)
        if self.settings.word_embed_dim:
            w_BxTxW = self.word_embed(self.drop_words(word_ids_BxT, deterministic))
            x_BxTxF = jnp.concatenate([w_BxTxW, x_BxTxF], axis=-1)
        h_BxTxD = self.encoder(x_BxTxF, words_B, deterministic)
        if self.settings.placement == "input_output":
            e_BxTxD = self.elmo("output_mix", layers_KxBxTxD, mask_BxT, deterministic)
            h_BxTxD = jnp.concatenate([h_BxTxD, e_BxTxD], axis=-1)
        return h_BxTxD, mask_BxT

    def __call__(self, batch: dict[str, Array], deterministic: bool = True) -> Array:
        """Logits [B, num_labels] (classify), [B, T, num_labels] (tag) or scores [B] (regress)."""
        h_BxTxD, mask_BxT = self.encode(batch.get("token_ids"), batch.get("char_ids"),
                                        batch.get("word_ids"), batch["lengths"], deterministic)
        if self.output is WORD_CLASSES:
            return self.head(self.dropout(h_BxTxD, deterministic=deterministic))
        u_BxD = max_pool(h_BxTxD, mask_BxT)
        if self.pair:
            v_BxD = max_pool(*self.encode(batch.get("token_ids_b"), batch.get("char_ids_b"),
                                          batch.get("word_ids_b"), batch["lengths_b"],
                                          deterministic))
            u_BxD = jnp.concatenate([u_BxD, v_BxD, jnp.abs(u_BxD - v_BxD), u_BxD * v_BxD], -1)
        out = self.head(self.dropout(u_BxD, deterministic=deterministic))
        return out[:, 0] if self.output is SCORE else out


def mix_penalty(params: Params, l2_coef: float) -> Array:
    """l2_coef * ||s||^2 summed over the model's ScalarMixes (0 without any)."""
    return sum((scalar_mix_penalty(params[m]["scalars"], l2_coef) for m in MIXES if m in params),
               jnp.zeros((), jnp.float32))


def mix_weights(params: Params) -> dict[str, dict[str, list[float] | float]]:
    """What each mix learned: {"input_mix": {"weights": softmax(s) as K floats, "gamma": g},
    "output_mix": ...} (JSON-ready; empty for top_layer_only)."""
    out = {}
    for name in MIXES:
        if name in params:
            mixed = scalar_mix_weights(jax.device_get(params[name]))
            out[name] = {"weights": [float(w) for w in mixed["weights"]],
                         "gamma": mixed["gamma"]}
    return out




def _example_batch_fn(config: ElmoConfig, output: Output, pair: bool,
                      settings: ElmoTaskSettings
                      ) -> Callable[[int, int], dict[str, np.ndarray]]:
    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        B, T = batch_size, seq_length
        sentence = {"lengths": np.full((B,), T, np.int32)}
        if config.token_encoder == "char_cnn":
            sentence["char_ids"] = np.zeros((B, T, config.max_chars), np.int32)
        if config.token_encoder == "word":
            sentence["token_ids"] = np.zeros((B, T), np.int32)
        if settings.word_embed_dim:
            sentence["word_ids"] = np.zeros((B, T), np.int32)
        batch = dict(sentence)
        if pair:
            batch.update({f"{k}_b": v for k, v in sentence.items()})
        return {**batch, **output.example_targets(B, T)}

    return example_batch


def elmo_task_objective(
    elmo_config: ElmoConfig, output: Output, num_labels: int,
    settings: ElmoTaskSettings | None = None, pair: bool = False,
) -> Objective:
    """The ELMo task model predicting `output` (one of OUTPUTS; `pair`: of two sentences)
    with a frozen biLM of `elmo_config`. Its name, `elmo_[pair_]<output.head>`, is what the
    run's record keeps (training/workdir.py).

    Train it with `make_optimizer(frozen=FROZEN)` and put the pretrained biLM in with
    `with_pretrained_bilm` (e.g. `Job(experiment, lambda p: with_pretrained_bilm(p,
    bilm_params))`). The objective's config is the biLM as the task model holds it.
    """
    settings = settings or ElmoTaskSettings()
    if output not in OUTPUTS or (pair and output not in PAIRED):
        raise ValueError(f"the ELMo task model predicts {', '.join(o.name for o in OUTPUTS)} "
                         f"(of two sentences: {', '.join(o.name for o in PAIRED)}), not "
                         f"{output.name}{' of two' if pair else ''}")
    if output is SCORE and num_labels != 1:
        raise ValueError(f"a regression task has one output, not num_labels={num_labels}: "
                         "set num_labels=1")
    config = task_bilm_config(elmo_config)
    model = ElmoTaskModel(config, output, num_labels, settings, pair)

    def init_variables(rng: Array, batch: dict[str, Array]) -> VariableDict:
        return model.init({"params": rng, "dropout": rng}, batch)

    def examples(batch: dict[str, Array]) -> Array:
        return jnp.float32(batch[output.target_features[0]].shape[0])

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        params = {**params, "bilm": jax.lax.stop_gradient(params["bilm"])}
        outputs = model.apply({"params": params}, batch, rng is None,
                              rngs=None if rng is None else {"dropout": rng})
        # The penalty is on parameters, once per batch: as a Mean over the batch's examples
        # it adds up to itself over any split of the batch.
        count = examples(batch)
        penalty = Mean(mix_penalty(params, settings.l2_coef) * count, count)
        return {**output.loss(outputs, batch), "mix_penalty": penalty}

    loss_fn = output.task_loss(sums, mix_penalty=(1.0, examples))

    metric = output.metric
    progress = (("loss", "loss"), (metric, metric[:3]))
    name = f"elmo_{'pair_' if pair else ''}{output.head}"
    return Objective(name, "elmo", config, model, init_variables, loss_fn,
                     _example_batch_fn(config, output, pair, settings), progress)


def with_pretrained_bilm(params: Params, bilm_params: Params) -> Params:
    """`params` of a task model with its "bilm" subtree taken from a trained biLM's parameters
    (an ELMo checkpoint's, or `load_bilm_hdf5`'s). The task's one-row softmax stand-in stays
    when the biLM's own softmax is bigger; every other parameter must have the same shape.
    Copies take the current parameters' shardings (the caller's arrays survive donation)."""
    current = params["bilm"]
    missing = set(current) - set(bilm_params)
    if missing:
        raise ValueError(f"the biLM parameters lack {', '.join(sorted(missing))}: pass the "
                         "params of an ElmoBiLM")

    def take(path: tuple, old: Array) -> Array:
        new = bilm_params
        for key in path:
            new = new[key.key]
        if path[-1].key.startswith("softmax") and new.shape != old.shape:
            return old  # not used for features
        if new.shape != old.shape:
            name = "/".join(k.key for k in path)
            raise ValueError(f"biLM parameter {name} is {tuple(new.shape)} but the task model "
                             f"expects {tuple(old.shape)}: build the task with the biLM's "
                             "elmo_config")
        return jax.device_put(jnp.array(new, copy=True), old.sharding)

    return {**params, "bilm": jax.tree_util.tree_map_with_path(take, current)}
