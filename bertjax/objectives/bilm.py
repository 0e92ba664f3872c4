"""ELMo's biLM objective: forward next-token plus backward previous-token log likelihood.

    loss = (NLL_forward + NLL_backward) / 2,   perplexity per direction = exp(NLL_direction)

each NLL the mean over its direction's targets (a sentence's real tokens but the first or the
last; every position of a stream window).

Two batch layouts (see `bertjax.data.elmo.examples`):
  * sentences: token_ids [B, T] (<S> w_1 .. w_n </S>, padded), lengths [B], char_ids
    [B, T, C]. The forward direction predicts token t+1 at t, the backward one token t-1.
  * stream (truncated BPTT): token_ids / next_token_ids windows of the text, reverse_token_ids
    / reverse_next_token_ids windows of the reversed text, char ids for both, and the LSTM
    state carry_c [B, L, 2, H], carry_h [B, L, 2, P] from the previous window. The new state
    comes back in the metrics as carry_c / carry_h (gradients do not flow through it).

The softmax is full, or sampled (log-uniform sampler, `num_sampled` negatives shared by the
batch) for large vocabularies; evaluation (rng None) always uses the full softmax, so its
perplexities are exact while the training ones of a sampled run are of the sampled loss.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.typing import VariableDict

from bertjax.models.elmo import ElmoBiLM, ElmoConfig, zero_carry
from bertjax.objectives.objective import Carry, Loss, Mean, Metrics, Objective
from bertjax.objectives.sampled_softmax import sampled_softmax_xent
from bertjax.typing import Params

Array = jax.Array
MODES = ("sentence", "stream")
SOFTMAXES = ("full", "sampled")


def _sentence_tops(module: ElmoBiLM, batch: dict[str, Array], deterministic: bool) -> tuple:
    out = module(batch["token_ids"], batch.get("char_ids"), batch["lengths"], deterministic)
    h_2xBxTxP = jnp.stack([out["forward"][-1], out["backward"][-1]])
    return module.output_dropout(h_2xBxTxP, deterministic), module.softmax_weights(), None


def _stream_tops(module: ElmoBiLM, batch: dict[str, Array], deterministic: bool) -> tuple:
    carry = {"c": batch["carry_c"], "h": batch["carry_h"]}
    out = module.stream(
        (batch["token_ids"], batch.get("char_ids")),
        (batch["reverse_token_ids"], batch.get("reverse_char_ids")),
        carry,
        deterministic,
    )
    h_2xBxTxP = jnp.stack([out["forward"][-1], out["backward"][-1]])
    return module.output_dropout(h_2xBxTxP, deterministic), module.softmax_weights(), out["carry"]


def sentence_targets(token_ids_BxT: Array, lengths_B: Array) -> tuple[Array, Array]:
    """Targets [2, B, T] (next token, previous token) and their 0/1 weights."""
    T = token_ids_BxT.shape[1]
    t_T = jnp.arange(T)
    valid_BxT = t_T[None, :] < lengths_B[:, None]
    next_BxT = jnp.roll(token_ids_BxT, -1, axis=1)
    prev_BxT = jnp.roll(token_ids_BxT, 1, axis=1)
    w_next_BxT = valid_BxT & (t_T[None, :] + 1 < lengths_B[:, None])
    w_prev_BxT = valid_BxT & (t_T[None, :] >= 1)
    weights = jnp.stack([w_next_BxT, w_prev_BxT]).astype(jnp.float32)
    return jnp.stack([next_BxT, prev_BxT]), weights


def _xent(h_2xBxTxP: Array, targets_2xBxT: Array, softmax: tuple[Array, Array],
          rng: Array | None, num_sampled: int, unique: bool) -> Array:
    kernel_VxP, bias_V = softmax
    if rng is None or num_sampled <= 0:
        logits = jnp.einsum("dbtp,vp->dbtv", h_2xBxTxP, kernel_VxP.astype(h_2xBxTxP.dtype))
        logits = logits.astype(jnp.float32) + bias_V.astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets_2xBxT)
    D, B, T, P = h_2xBxTxP.shape
    xents = [
        sampled_softmax_xent(h_2xBxTxP[d].reshape(B * T, P), targets_2xBxT[d].reshape(B * T),
                             kernel_VxP, bias_V.astype(jnp.float32),
                             jax.random.fold_in(rng, d), num_sampled, unique).reshape(B, T)
        for d in range(D)
    ]
    return jnp.stack(xents)


def bilm_targets(batch: dict[str, Array]) -> tuple[Array, Array]:
    """Targets [2, B, T] (forward, backward) and their weights: a sentence's real next and
    previous tokens, or every position of a stream window."""
    if "carry_c" in batch:
        targets = jnp.stack([batch["next_token_ids"], batch["reverse_next_token_ids"]])
        return targets, jnp.ones(targets.shape, jnp.float32)
    return sentence_targets(batch["token_ids"], batch["lengths"])


def bilm_weights(batch: dict[str, Array]) -> dict[str, Array]:
    """The forward and backward targets' weights summed over `batch`."""
    weights_2 = bilm_targets(batch)[1].sum((1, 2))
    return {"forward_loss": weights_2[0], "backward_loss": weights_2[1]}


def bilm_loss(
    params: Params,
    batch: dict[str, Array],
    rng: Array | None,
    model: ElmoBiLM,
    num_sampled: int = 0,
    unique: bool = True,
) -> Metrics:
    """The weighted sums of the biLM's loss and metrics (a Loss's sums); num_sampled 0 means
    full softmax."""
    deterministic = rng is None
    rngs = None if deterministic else {"dropout": jax.random.fold_in(rng, 0)}
    stream = "carry_c" in batch
    if not stream and "lengths" not in batch:
        raise ValueError("the batches are stream windows but elmo_pretraining.mode is "
                         "'sentence': set elmo_pretraining.mode and elmo_source.mode alike")
    tops = _stream_tops if stream else _sentence_tops
    h_2xBxTxP, softmax, carry = model.apply(
        {"params": params}, batch, deterministic, method=tops, rngs=rngs
    )
    targets, weights = bilm_targets(batch)
    sample_rng = None if deterministic else jax.random.fold_in(rng, 1)
    xent_2xBxT = _xent(h_2xBxTxP, targets, softmax, sample_rng, num_sampled, unique)
    forward, backward = Mean.of(xent_2xBxT[0], weights[0]), Mean.of(xent_2xBxT[1], weights[1])
    metrics = {
        "forward_loss": forward,
        "backward_loss": backward,
        "forward_ppl": Mean(forward.total, forward.weight, exp=True),
        "backward_ppl": Mean(backward.total, backward.weight, exp=True),
        "tokens": forward.weight,
    }
    if stream:
        metrics["carry_c"] = jax.lax.stop_gradient(carry["c"])
        metrics["carry_h"] = jax.lax.stop_gradient(carry["h"])
    return metrics


def example_batch_fn(config: ElmoConfig, mode: str
                     ) -> Callable[[int, int], dict[str, np.ndarray]]:
    """example_batch(batch_size, seq_length): zero arrays shaped like the data's batches."""

    def example_batch(batch_size: int, seq_length: int) -> dict[str, np.ndarray]:
        B, T, C = batch_size, seq_length, config.max_chars
        ints = lambda *shape: np.zeros(shape, np.int32)  # noqa: E731
        chars = config.token_encoder == "char_cnn"
        if mode == "sentence":
            batch = {"token_ids": ints(B, T), "lengths": np.full((B,), T, np.int32)}
            if chars:
                batch["char_ids"] = ints(B, T, C)
            return batch
        batch = {name: ints(B, T) for name in
                 ("token_ids", "next_token_ids", "reverse_token_ids", "reverse_next_token_ids")}
        if chars:
            batch["char_ids"] = ints(B, T, C)
            batch["reverse_char_ids"] = ints(B, T, C)
        return batch

    return example_batch


def lstm_state_carry(config: ElmoConfig) -> Carry:
    """The LSTM state a stream-mode step leaves for the next window of each row."""

    def zeros(batch_size: int) -> dict[str, np.ndarray]:
        state = zero_carry(config, batch_size)
        return {"carry_c": state["c"], "carry_h": state["h"]}

    return Carry(zeros)


def elmo_pretraining(
    config: ElmoConfig,
    mode: str = "sentence",
    softmax: str = "full",
    num_sampled: int = 8192,
    sampler_unique: bool = True,
) -> Objective:
    """ELMo's biLM objective: `mode` "sentence" (padded sentences) or "stream" (truncated BPTT,
    the LSTM state carried from step to step); `softmax` "full" or "sampled" (`num_sampled`
    log-uniform negatives)."""
    if mode not in MODES:
        raise ValueError(f"unknown ELMo data mode {mode!r}: set elmo_pretraining.mode to "
                         "sentence or stream")
    if softmax not in SOFTMAXES:
        raise ValueError(f"unknown softmax {softmax!r}: set elmo_pretraining.softmax to "
                         "full or sampled")
    model = ElmoBiLM(config)
    sampled = num_sampled if softmax == "sampled" else 0
    if sampled and sampled >= config.vocab_size:
        raise ValueError(f"num_sampled={sampled} is not below the vocabulary size "
                         f"{config.vocab_size}: lower elmo_pretraining.num_sampled or use "
                         "softmax='full'")

    def init_variables(rng: Array, batch: dict[str, Array]) -> VariableDict:
        lengths = batch.get("lengths", jnp.full(batch["token_ids"].shape[:1],
                                                batch["token_ids"].shape[1]))
        return model.init({"params": rng, "dropout": rng}, batch["token_ids"],
                          batch.get("char_ids"), lengths)

    def sums(params: Params, batch: dict[str, Array], rng: Array | None) -> Metrics:
        return bilm_loss(params, batch, rng, model, sampled, sampler_unique)

    loss_fn = Loss(sums, {"forward_loss": 0.5, "backward_loss": 0.5}, bilm_weights)

    progress = (("loss", "loss"), ("forward_ppl", "fwd_ppl"), ("backward_ppl", "bwd_ppl"))
    carry = lstm_state_carry(config) if mode == "stream" else None
    return Objective("elmo_pretraining", "elmo", config, model, init_variables, loss_fn,
                     example_batch_fn(config, mode), progress, carry)
