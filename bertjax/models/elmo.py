"""ELMo's bidirectional language model (Peters et al. 2018, "Deep contextualized word
representations").

    x = TokenEncoder(token)                       char CNN + highway + projection, or a word table
    forward:  h^f_1 = LSTM^f_1(x)       h^f_j = LSTM^f_j(h^f_{j-1}) + h^f_{j-1}   (j >= 2)
    backward: the same with separate weights over the reversed unpadded tokens
    p(next token)  = softmax(W h^f_L + b);   p(previous token) = softmax(W h^b_L + b)

The token encoder and the softmax (W, b) are shared by both directions. Each LSTM has a
projection and clips cells and projections (3 in the original). Dropout is applied to each
layer's input and to the top outputs before the softmax, as in bilm-tf.

Layer representations (what a downstream task mixes): h_0 = [x; x], h_j = [h^f_j; h^b_j], so
K = L + 1 layers of width 2P hold the paper's 2L + 1 vectors per token.

Two ways to run it: `__call__` embeds whole sentences with a length-aware reversal for the
backward direction (deterministic, no state between batches: what embedding uses); `stream`
runs both directions left to right over two token streams (the text and the text reversed)
from a carried LSTM state, for truncated back-propagation through time.

Sharding: the softmax and word table are ("vocab", "embed") like BERT's embeddings; LSTM
kernels put the cell axis H on "mlp" (model-parallel; each shard keeps all four gates of its
cells) and the projection axis on "embed". The char CNN, highway and the direction and gate
axes use names outside DEFAULT_RULES ("chars", "filters", "direction", "gates", ...), so they
are replicated unless `partitioning.rules_for` maps them.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bertjax.layers.char_cnn import ELMO_FILTERS, CharCnnEncoder
from bertjax.layers.dropout import Dropout
from bertjax.layers.lstm import ProjectedLstm, reverse_padded
from bertjax.layers.transformer import dtype_name
from bertjax.models.sizes import FamilyConfig
from bertjax.typing import Params

Array = jax.Array
FAMILY = "elmo"  # the model family recorded in WORKDIR/model.json
TOKEN_ENCODERS = ("char_cnn", "word")


@dataclasses.dataclass(frozen=True)
class ElmoConfig(FamilyConfig):
    """biLM hyper-parameters. `dtype` is the compute dtype; parameters stay `param_dtype`.

    Not a Transformer, so no TransformerConfig: every setting is ElmoConfig's own.
    """

    BUILDER: ClassVar[str] = "elmo_config"

    vocab_size: int = 793471  # the softmax's words (and the word encoder's)
    token_encoder: str = "char_cnn"  # or "word"
    max_chars: int = 50  # characters per token, begin/end-of-word marks included
    num_chars: int = 262  # char ids: 0 padded token, 256 bytes, 5 special characters
    char_embed_dim: int = 16
    char_filters: tuple[tuple[int, int], ...] = ELMO_FILTERS
    num_highway: int = 2
    char_activation: str = "relu"
    num_layers: int = 2
    cell_size: int = 4096
    proj_size: int = 512
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    residual: bool = True
    dropout_rate: float = 0.1
    dtype: str = "float32"
    param_dtype: str = "float32"
    scan_unroll: int = 1

    def __post_init__(self) -> None:
        if self.token_encoder not in TOKEN_ENCODERS:
            raise ValueError(f"unknown token encoder {self.token_encoder!r}: set "
                             f"elmo_config.token_encoder to one of {', '.join(TOKEN_ENCODERS)}")
        object.__setattr__(self, "char_filters", tuple(tuple(f) for f in self.char_filters))
        for name in ("dtype", "param_dtype"):  # names, as TransformerConfig keeps them
            object.__setattr__(self, name, dtype_name(name, getattr(self, name)))

    @property
    def num_representations(self) -> int:
        """K = L + 1 layers (token layer, then one per LSTM layer)."""
        return self.num_layers + 1

    @property
    def representation_size(self) -> int:
        """Width of a layer representation: [forward; backward]."""
        return 2 * self.proj_size


TINY_FILTERS = ((1, 16), (2, 16), (3, 32), (4, 64))
# name: (layers, cell size, projection, char filters, highway layers). small / medium /
# original are AllenNLP's released 2x1024_128, 2x2048_256 and 2x4096_512 models.
SIZES: dict[str, tuple[int, int, int, tuple, int]] = {
    "tiny": (2, 256, 64, TINY_FILTERS, 1),
    "small": (2, 1024, 128, ELMO_FILTERS, 1),
    "medium": (2, 2048, 256, ELMO_FILTERS, 1),
    "original": (2, 4096, 512, ELMO_FILTERS, 2),
}
# Parameters without the softmax (what embedding uses, char CNN encoder); the softmax adds
# vocab_size * (projection + 1): 407.1M for the original's 793,471 words.
PARAM_COUNTS: dict[str, int] = {
    "tiny": 645_920,
    "small": 13_593_312,
    "medium": 28_027_744,
    "original": 93_600_864,
}


def elmo_config(size: str, **overrides: Any) -> ElmoConfig:
    """The named size ("tiny", "small", "medium", "original") with optional overrides."""
    if size not in SIZES:
        raise ValueError(f"unknown ELMo size {size!r}: set elmo_config.size to one of "
                         f"{', '.join(SIZES)}")
    layers, cell, proj, filters, highway = SIZES[size]
    fields = dict(num_layers=layers, cell_size=cell, proj_size=proj, char_filters=filters,
                  num_highway=highway)
    return ElmoConfig.from_dict({**fields, **overrides})


class ElmoBiLM(nn.Module):
    """Token encoder, L forward and L backward projected LSTMs, one shared softmax."""

    config: ElmoConfig

    def setup(self) -> None:
        cfg = self.config
        dtype, param_dtype = jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)
        if cfg.token_encoder == "char_cnn":
            self.token_encoder = CharCnnEncoder(
                cfg.proj_size, cfg.char_filters, cfg.num_highway, cfg.char_embed_dim,
                cfg.num_chars, cfg.char_activation, dtype, param_dtype,
            )
        else:
            self.token_encoder = nn.Embed(
                cfg.vocab_size, cfg.proj_size, param_dtype=param_dtype,
                embedding_init=nn.with_logical_partitioning(
                    nn.initializers.normal(1.0), ("vocab", "embed")),
            )
        self.lstms = [
            ProjectedLstm(cfg.cell_size, cfg.proj_size, 2, cfg.cell_clip, cfg.proj_clip,
                          unroll=cfg.scan_unroll, dtype=dtype, param_dtype=param_dtype)
            for _ in range(cfg.num_layers)
        ]
        std = cfg.proj_size ** -0.5  # bilm-tf: N(0, 1/P)
        self.softmax_kernel = self.param(
            "softmax_kernel",
            nn.with_logical_partitioning(nn.initializers.normal(std), ("vocab", "embed")),
            (cfg.vocab_size, cfg.proj_size), param_dtype,
        )
        self.softmax_bias = self.param(
            "softmax_bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
            (cfg.vocab_size,), param_dtype,
        )
        self.dropout = Dropout(cfg.dropout_rate)

    def embed_tokens(self, token_ids_BxT: Array | None, char_ids_BxTxC: Array | None) -> Array:
        """Context-free token vectors x [B, T, P] (the static, layer-0 representation)."""
        if self.config.token_encoder == "char_cnn":
            if char_ids_BxTxC is None:
                raise ValueError("the char CNN token encoder needs char_ids")
            return self.token_encoder(char_ids_BxTxC)
        if token_ids_BxT is None:
            raise ValueError("the word token encoder needs token_ids")
        return self.token_encoder(token_ids_BxT).astype(jnp.dtype(self.config.dtype))

    def run_lstms(
        self, x_2xBxTxP: Array, carry: dict[str, Array] | None, deterministic: bool
    ) -> tuple[list[Array], dict[str, Array]]:
        """Both directions through the L layers; carry {"c": [B,L,2,H], "h": [B,L,2,P]}."""
        outputs, new_c, new_h = [], [], []
        for i, lstm in enumerate(self.lstms):
            x_in = self.dropout(x_2xBxTxP, deterministic=deterministic)
            state = None
            if carry is not None:
                state = (jnp.swapaxes(carry["c"][:, i], 0, 1), jnp.swapaxes(carry["h"][:, i], 0, 1))
            y_2xBxTxP, (c_2xBxH, h_2xBxP) = lstm(x_in, state)
            if self.config.residual and i > 0:
                y_2xBxTxP = y_2xBxTxP + x_in
            outputs.append(y_2xBxTxP)
            new_c.append(jnp.swapaxes(c_2xBxH, 0, 1))
            new_h.append(jnp.swapaxes(h_2xBxP, 0, 1))
            x_2xBxTxP = y_2xBxTxP
        return outputs, {"c": jnp.stack(new_c, 1), "h": jnp.stack(new_h, 1)}

    def __call__(
        self,
        token_ids_BxT: Array | None,
        char_ids_BxTxC: Array | None,
        lengths_B: Array,
        deterministic: bool = True,
    ) -> dict[str, Any]:
        """Whole padded sentences: token vectors and every layer's forward/backward outputs."""
        x_BxTxP = self.embed_tokens(token_ids_BxT, char_ids_BxTxC)
        x_2xBxTxP = jnp.stack([x_BxTxP, reverse_padded(x_BxTxP, lengths_B)])
        outputs, _ = self.run_lstms(x_2xBxTxP, None, deterministic)
        return {
            "token": x_BxTxP,
            "forward": [y[0] for y in outputs],
            "backward": [reverse_padded(y[1], lengths_B) for y in outputs],
        }

    def stream(
        self,
        inputs: tuple[Array | None, Array | None],
        reverse_inputs: tuple[Array | None, Array | None],
        carry: dict[str, Array],
        deterministic: bool = True,
    ) -> dict[str, Any]:
        """Truncated BPTT: the forward LSTMs read `inputs` (token_ids, char_ids) and the
        backward LSTMs read `reverse_inputs` (the reversed stream), both from `carry`."""
        x_BxTxP = self.embed_tokens(*inputs)
        xr_BxTxP = self.embed_tokens(*reverse_inputs)
        outputs, carry = self.run_lstms(jnp.stack([x_BxTxP, xr_BxTxP]), carry, deterministic)
        return {"forward": [y[0] for y in outputs], "backward": [y[1] for y in outputs],
                "carry": carry}

    def output_dropout(self, h: Array, deterministic: bool = True) -> Array:
        """Dropout on the top LSTM outputs before the softmax."""
        return self.dropout(h, deterministic=deterministic)

    def softmax_weights(self) -> tuple[Array, Array]:
        """The shared softmax (W [V, P], b [V])."""
        return self.softmax_kernel, self.softmax_bias


def abstract_params(config: ElmoConfig) -> Params:
    """The biLM's parameter tree as shapes and dtypes (nothing is initialised)."""
    ids = jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2, config.max_chars), jnp.int32)
    init = lambda: ElmoBiLM(config).init(jax.random.key(0), *ids, jnp.array([2]))  # noqa: E731
    return nn.unbox(jax.eval_shape(init)["params"])


def zero_carry(config: ElmoConfig, batch_size: int) -> dict[str, np.ndarray]:
    """The initial LSTM state of a stream: zeros, batch first (so it shards like a batch)."""
    L, H, P = config.num_layers, config.cell_size, config.proj_size
    return {"c": np.zeros((batch_size, L, 2, H), np.float32),
            "h": np.zeros((batch_size, L, 2, P), np.float32)}


def layer_states(outputs: dict[str, Any]) -> Array:
    """Every layer's vector of every token from `ElmoBiLM`'s outputs: [K = L + 1, B, T, 2P],
    float32, with h_0 = [x; x] (the token layer: static, context-free) and h_j = [forward_j;
    backward_j] (see module doc). What the analyses read and ELMo's task models mix."""
    x_BxTxP = outputs["token"]
    layers: Sequence[Array] = [jnp.concatenate([x_BxTxP, x_BxTxP], -1)] + [
        jnp.concatenate([f, b], -1) for f, b in zip(outputs["forward"], outputs["backward"],
                                                     strict=True)
    ]
    return jnp.stack([h.astype(jnp.float32) for h in layers])
