"""A length-aware bidirectional LSTM stack: the encoder of feature-based task models.

    layer 1:  h^f = LSTM^f(x)   h^b = reverse(LSTM^b(reverse(x)))   y_1 = [h^f; h^b]   [B, T, 2H]
    layer j:  the same over dropout(y_{j-1})

Each row's backward direction reads only that row's own tokens, reversed (`reverse_padded`),
so padding never reaches a real token in either direction and a sentence gets the same
outputs alone or in any padded batch: torch's packed sequences, without the packing.
Outputs at padded positions are zero.

Both directions of a layer run as one `ProjectedLstm` scan (no projection); the ELMo task
model (Peters et al. 2018) and BERT's feature-based tagger (Devlin et al. 2018, Table 7) put
it between frozen pretrained features and their heads.
"""


import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from bertjax.layers.dropout import Dropout
from bertjax.layers.lstm import ProjectedLstm, reverse_padded

Array = jax.Array


def length_mask(lengths_B: Array, seq_length: int) -> Array:
    """[B, T] booleans, True on each row's first lengths[b] positions."""
    return jnp.arange(seq_length)[None, :] < lengths_B[:, None]


class BiLstmEncoder(nn.Module):
    """`num_layers` stacked bidirectional LSTMs over [B, T, F] inputs -> [B, T, 2H] outputs.

    Dropout (`dropout_rate`) is applied between layers, not to the input or the output: the
    caller decides those. The forget-gate bias starts at `forget_bias` (1.0, as TF's cells).
    """

    hidden_size: int
    num_layers: int = 1
    dropout_rate: float = 0.0
    forget_bias: float = 1.0
    dtype: DTypeLike = jnp.float32
    param_dtype: DTypeLike = jnp.float32

    @nn.compact
    def __call__(self, x_BxTxF: Array, lengths_B: Array, deterministic: bool = True) -> Array:
        if self.num_layers < 1:
            raise ValueError(f"BiLstmEncoder(num_layers={self.num_layers}): set num_layers >= 1")
        mask_BxTx1 = length_mask(lengths_B, x_BxTxF.shape[1])[..., None]
        h_BxTxD = x_BxTxF
        for i in range(self.num_layers):
            if i > 0:
                h_BxTxD = Dropout(self.dropout_rate)(h_BxTxD, deterministic=deterministic)
            x_2xBxTxD = jnp.stack([h_BxTxD, reverse_padded(h_BxTxD, lengths_B)])
            lstm = ProjectedLstm(self.hidden_size, None, num_directions=2,
                                 forget_bias=self.forget_bias, dtype=self.dtype,
                                 param_dtype=self.param_dtype, name=f"layer_{i}")
            y_2xBxTxH, _ = lstm(x_2xBxTxD)
            h_BxTxD = jnp.concatenate(
                [y_2xBxTxH[0], reverse_padded(y_2xBxTxH[1], lengths_B)], axis=-1
            )
            h_BxTxD = jnp.where(mask_BxTx1, h_BxTxD, 0.0).astype(self.dtype)
        return h_BxTxD
