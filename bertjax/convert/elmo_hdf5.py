"""ELMo weights in bilm-tf / AllenNLP's layout: an options JSON and a weights HDF5.

HDF5 datasets (bilm-tf's `dump_weights`; the released elmo_*_weights.hdf5 files):

    char_embed                      [n_chars, E]   bilm-tf's training ids; we add row 0 (padded
                                                   token, zeros) as its inference graph does
    CNN/W_cnn_i, CNN/b_cnn_i        [1, width, E, filters], [filters]   (tf.nn.conv2d layout)
    CNN_high_i/W_carry, b_carry     x @ W_carry: the gate g in g * relu(..) + (1 - g) * x
    CNN_high_i/W_transform, b_transform
    CNN_proj/W_proj, b_proj         [filters, P], [P]
    RNN_d/RNN/MultiRNNCell/Cell{k}/LSTMCell/W_0   [I + P, 4H]  ([x, h] @ W_0), direction d:
                                                   0 forward, 1 backward; layer k
                                    .../B     [4H]    gates i, j (new input), f, o; TF adds
                                                      forget_bias 1.0 to f when it runs
                                    .../W_P_0 [H, P]  projection
    softmax/W, softmax/b            [V, P], [V]   optional (bilm-tf does not dump them)

Our LSTM orders gates i, f, j, o and stores the forget bias in `b`, so import reorders the
gate blocks and adds 1.0 to f (export does the reverse).

bertjax's export adds one key to the options, `word_tokenizer`: how its run split sentences into
words ("simple" or "whitespace", bertjax.tokenizers.elmo_vocab), so fine-tuning and embedding
from the files split text as the biLM was trained. bilm-tf and AllenNLP ignore it; files without
it (bilm-tf's own) take whitespace-tokenized text.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import h5py
import numpy as np

from bertjax.models.elmo import ElmoConfig
from bertjax.tokenizers.elmo_vocab import TOKENIZERS
from bertjax.typing import PyTree

# Our gate g is TF's gate TF_TO_OURS[g]: (i, f, j, o) from (i, j, f, o).
TF_TO_OURS = (0, 2, 1, 3)
TF_FORGET_BIAS = 1.0
_RNN = "RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell/{name}"


class WeightFileError(ValueError):
    """An options or weights file that is not in the bilm-tf / AllenNLP layout."""


def config_from_options(options: dict[str, Any], vocab_size: int = 1) -> ElmoConfig:
    """ElmoConfig of a bilm-tf options dict (char CNN models)."""
    try:
        lstm, cnn = options["lstm"], options["char_cnn"]
        return ElmoConfig(
            vocab_size=vocab_size,
            token_encoder="char_cnn",
            max_chars=int(cnn["max_characters_per_token"]),
            char_embed_dim=int(cnn["embedding"]["dim"]),
            char_filters=tuple((int(w), int(n)) for w, n in cnn["filters"]),
            num_highway=int(cnn.get("n_highway") or 0),
            char_activation=cnn.get("activation", "relu"),
            num_layers=int(lstm.get("n_layers", 1)),
            cell_size=int(lstm["dim"]),
            proj_size=int(lstm["projection_dim"]),
            cell_clip=lstm.get("cell_clip"),
            proj_clip=lstm.get("proj_clip"),
            residual=bool(lstm.get("use_skip_connections", False)),
            dropout_rate=float(options.get("dropout", 0.1)),
        )
    except (KeyError, TypeError) as err:
        raise WeightFileError(f"ELMo options lack {err}: pass bilm-tf's options JSON (with "
                              "'lstm' and 'char_cnn' sections)") from err


def options_from_config(config: ElmoConfig) -> dict[str, Any]:
    """The bilm-tf options dict of a char-CNN ElmoConfig."""
    return {
        "lstm": {"dim": config.cell_size, "projection_dim": config.proj_size,
                 "n_layers": config.num_layers, "cell_clip": config.cell_clip,
                 "proj_clip": config.proj_clip, "use_skip_connections": config.residual},
        "char_cnn": {"activation": config.char_activation,
                     "filters": [list(f) for f in config.char_filters],
                     "n_highway": config.num_highway, "embedding": {"dim": config.char_embed_dim},
                     "n_characters": config.num_chars,
                     "max_characters_per_token": config.max_chars},
        "n_tokens_vocab": config.vocab_size, "dropout": config.dropout_rate, "bidirectional": True,
    }


def _gates_from_tf(w: np.ndarray, H: int) -> np.ndarray:
    """[X, 4H] in TF's gate order -> [X, 4, H] in ours."""
    return w.reshape(w.shape[0], 4, H)[:, TF_TO_OURS]


def _gates_to_tf(w: np.ndarray) -> np.ndarray:
    """[X, 4, H] in our order -> [X, 4H] in TF's (the permutation is its own inverse)."""
    return w[:, TF_TO_OURS].reshape(w.shape[0], -1)


def _read(f: h5py.File, name: str, path: str) -> np.ndarray:
    if name not in f:
        raise WeightFileError(f"{path} has no dataset {name!r}: not a bilm-tf/AllenNLP ELMo "
                              "weight file for these options")
    return np.asarray(f[name][...], np.float32)


def _token_encoder(f: h5py.File, cfg: ElmoConfig, path: str) -> dict[str, Any]:
    char_embed = _read(f, "char_embed", path)
    if char_embed.shape[0] + 1 != cfg.num_chars:
        raise WeightFileError(f"{path}: char_embed has {char_embed.shape[0]} rows, expected "
                              f"{cfg.num_chars - 1} (bilm-tf's 261 character ids)")
    params: dict[str, Any] = {
        "char_embed": {"embedding": np.concatenate([np.zeros_like(char_embed[:1]), char_embed])}
    }
    for i in range(len(cfg.char_filters)):
        params[f"conv_{i}"] = {"kernel": _read(f, f"CNN/W_cnn_{i}", path)[0],
                               "bias": _read(f, f"CNN/b_cnn_{i}", path)}
    if cfg.num_highway:
        params["highway"] = {
            f"layer_{i}_{part}": {"kernel": _read(f, f"CNN_high_{i}/W_{part}", path),
                                  "bias": _read(f, f"CNN_high_{i}/b_{part}", path)}
            for i in range(cfg.num_highway) for part in ("carry", "transform")
        }
    if sum(n for _, n in cfg.char_filters) != cfg.proj_size:
        params["projection"] = {"kernel": _read(f, "CNN_proj/W_proj", path),
                                "bias": _read(f, "CNN_proj/b_proj", path)}
    return params


def _lstm_layer(f: h5py.File, cfg: ElmoConfig, k: int, input_size: int, path: str) -> dict:
    H = cfg.cell_size
    per_direction = []
    for d in range(2):
        w = _read(f, _RNN.format(d=d, k=k, name="W_0"), path)
        if w.shape != (input_size + cfg.proj_size, 4 * H):
            want = (input_size + cfg.proj_size, 4 * H)
            raise WeightFileError(f"{path}: {_RNN.format(d=d, k=k, name='W_0')} has shape "
                                  f"{w.shape} but the options give {want}: pass matching files")
        b = _gates_from_tf(_read(f, _RNN.format(d=d, k=k, name="B"), path)[None], H)[0]
        b[1] += TF_FORGET_BIAS
        per_direction.append({
            "input_kernel": _gates_from_tf(w[:input_size], H),
            "recurrent_kernel": _gates_from_tf(w[input_size:], H),
            "bias": b,
            "projection": _read(f, _RNN.format(d=d, k=k, name="W_P_0"), path),
        })
    return {name: np.stack([p[name] for p in per_direction]) for name in per_direction[0]}


def load_bilm_hdf5(options_path: str | os.PathLike, weights_path: str | os.PathLike
                   ) -> tuple[ElmoConfig, dict[str, Any]]:
    """(ElmoConfig, ElmoBiLM params) from bilm-tf / AllenNLP files. Without softmax weights in
    the file the softmax is a zero placeholder of one word (embedding never uses it)."""
    options_path, weights_path = pathlib.Path(options_path), pathlib.Path(weights_path)
    try:
        options = json.loads(options_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WeightFileError(f"{options_path}: cannot read ELMo options ({err}): pass bilm-tf's "
                              "options JSON") from err
    try:
        f = h5py.File(weights_path, "r")
    except OSError as err:
        raise WeightFileError(f"{weights_path}: not a readable HDF5 file: pass bilm-tf's "
                              "weights .hdf5") from err
    with f:
        has_softmax = "softmax/W" in f
        vocab_size = f["softmax/W"].shape[0] if has_softmax else 1
        cfg = config_from_options(options, vocab_size)
        params: dict[str, Any] = {"token_encoder": _token_encoder(f, cfg, str(weights_path))}
        for k in range(cfg.num_layers):
            params[f"lstms_{k}"] = _lstm_layer(f, cfg, k, cfg.proj_size, str(weights_path))
        if has_softmax:
            params["softmax_kernel"] = _read(f, "softmax/W", str(weights_path))
            params["softmax_bias"] = _read(f, "softmax/b", str(weights_path))
        else:
            params["softmax_kernel"] = np.zeros((1, cfg.proj_size), np.float32)
            params["softmax_bias"] = np.zeros((1,), np.float32)
    return cfg, params


def word_tokenizer_of(options_path: str | os.PathLike) -> str:
    """How text is split into words for the biLM of these options: the run's tokenizer that
    bertjax's export recorded, else whitespace (bilm-tf's files: pre-tokenized text)."""
    options_path = pathlib.Path(options_path)
    try:
        found = json.loads(options_path.read_text(encoding="utf-8")).get(
            "word_tokenizer", "whitespace")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
        raise WeightFileError(f"{options_path}: cannot read ELMo options ({err}): pass bilm-tf's "
                              "options JSON") from err
    if found not in TOKENIZERS:
        raise WeightFileError(f"{options_path}: word_tokenizer {found!r} is none of "
                              f"{', '.join(TOKENIZERS)}: export the run again")
    return found


def save_bilm_hdf5(config: ElmoConfig, params: dict[str, Any], options_path: str | os.PathLike,
                   weights_path: str | os.PathLike, softmax: bool = True,
                   word_tokenizer: str | None = None) -> None:
    """Write a char-CNN ElmoBiLM's params in the layout `load_bilm_hdf5` (and AllenNLP) read;
    `word_tokenizer`: the run's, kept in the options (see the module docstring)."""
    if config.token_encoder != "char_cnn":
        raise WeightFileError("only char-CNN ELMo models have a bilm-tf weight layout: set "
                              "elmo_config.token_encoder = 'char_cnn'")
    params = _to_numpy(params)
    enc = params["token_encoder"]
    options = options_from_config(config)
    if word_tokenizer is not None:
        options["word_tokenizer"] = word_tokenizer
    pathlib.Path(options_path).write_text(json.dumps(options, indent=1), encoding="utf-8")
    with h5py.File(weights_path, "w") as f:
        f["char_embed"] = enc["char_embed"]["embedding"][1:]
        for i in range(len(config.char_filters)):
            f[f"CNN/W_cnn_{i}"] = enc[f"conv_{i}"]["kernel"][None]
            f[f"CNN/b_cnn_{i}"] = enc[f"conv_{i}"]["bias"]
        for i in range(config.num_highway):
            for part in ("carry", "transform"):
                f[f"CNN_high_{i}/W_{part}"] = enc["highway"][f"layer_{i}_{part}"]["kernel"]
                f[f"CNN_high_{i}/b_{part}"] = enc["highway"][f"layer_{i}_{part}"]["bias"]
        if "projection" in enc:
            f["CNN_proj/W_proj"] = enc["projection"]["kernel"]
            f["CNN_proj/b_proj"] = enc["projection"]["bias"]
        for k in range(config.num_layers):
            layer = params[f"lstms_{k}"]
            for d in range(2):
                w = np.concatenate([layer["input_kernel"][d], layer["recurrent_kernel"][d]])
                b = layer["bias"][d].copy()
                b[1] -= TF_FORGET_BIAS
                f[_RNN.format(d=d, k=k, name="W_0")] = _gates_to_tf(w)
                f[_RNN.format(d=d, k=k, name="B")] = _gates_to_tf(b[None])[0]
                f[_RNN.format(d=d, k=k, name="W_P_0")] = layer["projection"][d]
        if softmax:
            f["softmax/W"] = params["softmax_kernel"]
            f["softmax/b"] = params["softmax_bias"]


def _to_numpy(tree: PyTree) -> PyTree:
    if isinstance(tree, dict):
        return {k: _to_numpy(v) for k, v in tree.items()}
    return np.asarray(getattr(tree, "value", tree), np.float32)
