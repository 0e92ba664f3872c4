"""Hugging Face BERT checkpoints <-> bertjax parameters (import and export).

Names follow transformers' BertModel (bare) and BertForPreTraining (`bert.` prefix, `cls.` heads):

    embeddings.word_embeddings.weight              [V, E]   embeddings/word_embeddings/embedding
    encoder.layer.{i}.attention.self.query.weight  [HD, E]  encoder/layer_{i}/attention/query_kernel
                                                              (E, H, D)
    encoder.layer.{i}.attention.output.dense.weight [E, HD] encoder/layer_{i}/attention/out_kernel
                                                              (H, D, E)
    encoder.layer.{i}.intermediate.dense.weight    [M, E]   encoder/layer_{i}/mlp/wi/kernel (E, M)
    cls.predictions.transform.dense.weight         [E, E]   mlm_transform/kernel
    cls.seq_relationship.weight                    [2, E]   nsp/kernel

Torch Linear weights are [out, in], flax kernels [in, out]. The MLM decoder is tied to the word
embeddings and `cls.predictions.bias` in both libraries, so it is checked, never stored twice.

Import exactly (every parameter found, every tensor used) with `load_hf_bert(dir)` or
`hf_to_bertjax(state_dict, config)`; fill an initialised model with what a checkpoint holds,
keeping and reporting the rest, with `load_pretrained(path, params)` (or `fill_pretrained` for
tensors already read); export with `bertjax_to_hf` (BertModel, BertForPreTraining) and
`head_to_hf` (the fine-tuning heads of bertjax.finetune.heads.bert), and `hf_config` for
config.json.
The head count is not visible in the weights: take the config from config.json (`load_hf_config`).
"""

import dataclasses
import json
import logging
import math
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from bertjax.models.bert import BertConfig, BertForPreTraining, BertModel
from bertjax.typing import Params

PathLike = str | os.PathLike

# How a torch tensor becomes a bertjax parameter.
COPY, LINEAR, QKV_KERNEL, QKV_BIAS, OUT_KERNEL = "copy", "linear", "qkv", "qkv_bias", "out"

_EMBEDDINGS_AND_POOLER = {  # bertjax path (inside BertModel): (HF name, kind)
    "embeddings/word_embeddings/embedding": ("embeddings.word_embeddings.weight", COPY),
    "embeddings/position_embeddings/embedding": ("embeddings.position_embeddings.weight", COPY),
    "embeddings/segment_embeddings/embedding": ("embeddings.token_type_embeddings.weight", COPY),
    "embeddings/layer_norm/scale": ("embeddings.LayerNorm.weight", COPY),
    "embeddings/layer_norm/bias": ("embeddings.LayerNorm.bias", COPY),
    "pooler/kernel": ("pooler.dense.weight", LINEAR),
    "pooler/bias": ("pooler.dense.bias", COPY),
}
_LAYER = {  # inside encoder/layer_{i} : inside encoder.layer.{i}
    **{
        f"attention/{p}_{s}": (f"attention.self.{p}.{w}", kind)
        for p in ("query", "key", "value")
        for s, w, kind in (("kernel", "weight", QKV_KERNEL), ("bias", "bias", QKV_BIAS))
    },
    "attention/out_kernel": ("attention.output.dense.weight", OUT_KERNEL),
    "attention/out_bias": ("attention.output.dense.bias", COPY),
    "attention_layer_norm/scale": ("attention.output.LayerNorm.weight", COPY),
    "attention_layer_norm/bias": ("attention.output.LayerNorm.bias", COPY),
    "mlp/wi/kernel": ("intermediate.dense.weight", LINEAR),
    "mlp/wi/bias": ("intermediate.dense.bias", COPY),
    "mlp/wo/kernel": ("output.dense.weight", LINEAR),
    "mlp/wo/bias": ("output.dense.bias", COPY),
    "mlp_layer_norm/scale": ("output.LayerNorm.weight", COPY),
    "mlp_layer_norm/bias": ("output.LayerNorm.bias", COPY),
}
_HEADS = {  # BertForPreTraining's own parameters
    "mlm_transform/kernel": ("cls.predictions.transform.dense.weight", LINEAR),
    "mlm_transform/bias": ("cls.predictions.transform.dense.bias", COPY),
    "mlm_layer_norm/scale": ("cls.predictions.transform.LayerNorm.weight", COPY),
    "mlm_layer_norm/bias": ("cls.predictions.transform.LayerNorm.bias", COPY),
    "mlm_bias": ("cls.predictions.bias", COPY),
    "nsp/kernel": ("cls.seq_relationship.weight", LINEAR),
    "nsp/bias": ("cls.seq_relationship.bias", COPY),
}
_LAYER_PATH = re.compile(r"encoder/layer_(\d+)/(.+)")
_TIED = {  # tensor in a checkpoint: the tensor it must equal
    "cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}
_BUFFERS = {"embeddings.position_ids", "embeddings.token_type_ids"}
_DIMS = {  # BertConfig field: (its name in messages, HF tensor, axis)
    "vocab_size": ("vocab size", "embeddings.word_embeddings.weight", 0),
    "hidden_size": ("hidden size", "embeddings.word_embeddings.weight", 1),
    "max_position_embeddings": ("position count", "embeddings.position_embeddings.weight", 0),
    "type_vocab_size": ("segment vocab size", "embeddings.token_type_embeddings.weight", 0),
    "mlp_dim": ("intermediate size", "encoder.layer.0.intermediate.dense.weight", 0),
}
_HF_CONFIG = {  # BertConfig field: config.json key
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "mlp_dim": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
}
_HF_CONFIG_OPTIONAL = {
    "layer_norm_eps": "layer_norm_eps",
    "dropout_rate": "hidden_dropout_prob",
    "attention_dropout_rate": "attention_probs_dropout_prob",
    "initializer_range": "initializer_range",
}
_CHECKPOINT_FILES = ("model.safetensors", "pytorch_model.bin")


# ----------------------------------------------------------------------------- config


def config_from_hf(config_json: Mapping[str, Any], **overrides: Any) -> BertConfig:
    """A BertConfig from a transformers config.json dict; `overrides` set e.g. the dtype."""
    missing = [key for key in _HF_CONFIG.values() if key not in config_json]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}: pass a BERT config.json")
    unsupported = {
        "model_type": ("bert", "convert only BERT checkpoints (RoBERTa & co. differ)"),
        "hidden_act": ("gelu", "bertjax BERT uses the exact erf GELU"),
        "position_embedding_type": ("absolute", "bertjax BERT learns absolute positions"),
    }
    for key, (wanted, why) in unsupported.items():
        if config_json.get(key, wanted) != wanted:
            raise ValueError(
                f"config.json {key}={config_json[key]!r} is not supported: {why}; "
                f"only {key}={wanted!r} checkpoints convert"
            )
    fields = {field: int(config_json[key]) for field, key in _HF_CONFIG.items()}
    fields |= {f: float(config_json[k]) for f, k in _HF_CONFIG_OPTIONAL.items() if k in config_json}
    if fields["hidden_size"] % fields["num_heads"]:
        raise ValueError(
            f"config.json hidden_size {fields['hidden_size']} is not divisible by "
            f"num_attention_heads {fields['num_heads']}: fix the config"
        )
    return BertConfig.from_dict(fields | overrides)


def load_hf_config(path: PathLike, **overrides: Any) -> BertConfig:
    """The BertConfig of config.json, given it, its directory or a checkpoint file beside it."""
    path = pathlib.Path(path)
    file = path / "config.json" if path.is_dir() else path
    if file.suffix != ".json":
        file = file.with_name("config.json")
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file: pass a config.json or its directory")
    try:
        return config_from_hf(json.loads(file.read_text()), **overrides)
    except ValueError as e:
        raise ValueError(f"{file}: {e}") from None


# ----------------------------------------------------------------------------- files


def load_hf_state_dict(path: PathLike) -> dict[str, np.ndarray]:
    """Tensors of a .safetensors, pytorch_model.bin or .pt file, or a directory holding one.

    Names are returned as stored; the converters accept `bert.`-prefixed and bare names.
    """
    file = _checkpoint_file(pathlib.Path(path))
    if file.suffix == ".safetensors":
        try:
            return dict(load_file(file))
        except (SafetensorError, OSError) as e:
            raise ValueError(f"{file}: cannot be read ({' '.join(str(e).split())[:160]}): it "
                             "is truncated or damaged; download it again") from None
    if file.suffix in (".bin", ".pt", ".pth"):
        return _load_torch(file)
    raise ValueError(f"{file}: unknown checkpoint format: pass a .safetensors, .bin or .pt file")


def _checkpoint_file(path: pathlib.Path) -> pathlib.Path:
    if path.is_dir():
        found = [path / name for name in _CHECKPOINT_FILES if (path / name).is_file()]
        if not found:
            raise FileNotFoundError(
                f"{path}: holds no {' or '.join(_CHECKPOINT_FILES)}: pass the checkpoint file"
            )
        return found[0]
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such checkpoint: pass a .safetensors, pytorch_model.bin or .pt file, "
            "or a directory holding one"
        )
    return path


def _load_torch(file: pathlib.Path) -> dict[str, np.ndarray]:
    """A torch state dict as numpy arrays (bfloat16 widened to float32)."""
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"{file}: reading torch checkpoints needs torch: pip install torch, "
            "or pass the model.safetensors instead"
        ) from None
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError) as e:  # a truncated zip or pickle
        raise ValueError(f"{file}: cannot be read ({' '.join(str(e).split())[:160]}): it is "
                         "truncated or damaged; download it again") from None
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    tensors = {}
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(
                f"{file}: entry {name!r} is a {type(tensor).__name__}, not a tensor: "
                "save a plain state dict (torch.save(model.state_dict(), ...))"
            )
        tensor = tensor.detach().cpu()
        tensors[name] = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
    return tensors


# ----------------------------------------------------------------------------- names


def _hf_name(path: str) -> tuple[str, str]:
    """bertjax parameter path ('bert/encoder/layer_0/mlp/wi/kernel') -> (bare HF name, kind)."""
    if path in _HEADS:
        return _HEADS[path]
    inner = path.removeprefix("bert/")
    if inner in _EMBEDDINGS_AND_POOLER:
        return _EMBEDDINGS_AND_POOLER[inner]
    match = _LAYER_PATH.fullmatch(inner)
    if match and match.group(2) in _LAYER:
        name, kind = _LAYER[match.group(2)]
        return f"encoder.layer.{match.group(1)}.{name}", kind
    raise ValueError(
        f"bertjax parameter {path} has no Hugging Face counterpart: pass the 'params' "
        "collection of a BertModel or BertForPreTraining"
    )


def _normalize(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Bare BertModel names: drop `bert.`, rename TF-style LayerNorm gamma/beta."""
    tensors: dict[str, np.ndarray] = {}
    for name, value in state_dict.items():
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name.removeprefix("bert."))
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        if key in tensors:
            raise ValueError(f"checkpoint holds {key} twice (as {name}): pass one model's tensors")
        tensors[key] = np.asarray(value)
    for tied, source in _TIED.items():
        if tied not in tensors:
            continue
        if source not in tensors:
            tensors[source] = tensors[tied]
        elif not np.array_equal(tensors[tied], tensors[source]):
            raise ValueError(
                f"checkpoint {tied} differs from {source}: bertjax ties the MLM decoder, "
                "so an untied decoder cannot be imported"
            )
    return tensors


def _hf_shape(kind: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The checkpoint shape that fills a bertjax parameter of `shape`."""
    if kind == QKV_KERNEL:  # (E, H, D) <- [H*D, E]
        return (shape[1] * shape[2], shape[0])
    if kind == OUT_KERNEL:  # (H, D, E) <- [E, H*D]
        return (shape[2], shape[0] * shape[1])
    if kind == QKV_BIAS:  # (H, D) <- [H*D]
        return (math.prod(shape),)
    return tuple(reversed(shape)) if kind == LINEAR else tuple(shape)


def _to_bertjax(kind: str, w: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return (w if kind in (COPY, QKV_BIAS) else w.T).reshape(shape)


def _to_hf(kind: str, p: np.ndarray) -> np.ndarray:
    if kind == QKV_KERNEL:  # (E, H, D) -> [H*D, E]
        return p.reshape(p.shape[0], -1).T
    if kind == OUT_KERNEL:  # (H, D, E) -> [E, H*D]
        return p.reshape(-1, p.shape[-1]).T
    if kind == QKV_BIAS:
        return p.reshape(-1)
    return p.T if kind == LINEAR else p


def _dims(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """BertConfig sizes readable off HF-named tensor shapes (the head count is not)."""
    dims = {f: shapes[name][axis] for f, (_, name, axis) in _DIMS.items() if name in shapes}
    layers = {int(m.group(1)) for n in shapes if (m := re.match(r"encoder\.layer\.(\d+)\.", n))}
    if layers:
        dims["num_layers"] = max(layers) + 1
    return dims


def _check_dims(checkpoint: dict[str, int], model: dict[str, int]) -> None:
    for field, size in checkpoint.items():
        if field in model and model[field] != size:
            what = _DIMS[field][0] if field in _DIMS else "layer count"
            raise ValueError(
                f"checkpoint {what} {size} != model {field} {model[field]}: "
                f"set bert_config.{field}={size}"
            )


# ----------------------------------------------------------------------------- trees


def _is_box(x: object) -> bool:
    return isinstance(x, nn.meta.AxisMetadata)


def _flatten(params: Params) -> tuple[list[tuple[str, Any]], jax.tree_util.PyTreeDef]:
    """[(path 'a/b/c', leaf)] with boxes kept as leaves, and the treedef."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_box)
    named = [("/".join(str(getattr(k, "key", k)) for k in keys), leaf) for keys, leaf in leaves]
    return named, treedef


_VOCABULARY_ROWS = ("embeddings/word_embeddings/embedding", "mlm_bias")  # [V, ...] params


def cut_vocabulary(params: Params, config: BertConfig, size: int) -> tuple[Params, BertConfig]:
    """`params` (BertModel's, BertForPreTraining's or a head's around a "bert" encoder) and
    `config` with the token table and the MLM output bias cut to their first `size` rows: a
    model trained with vocab_size above what its vocabulary learned (VOCAB_SIZE 8192, a
    vocab.txt of 7,297 tokens) has rows no text reaches, which transformers would read as
    tokens its tokenizer lacks."""
    if size >= config.vocab_size:
        return params, config
    named, treedef = _flatten(params)
    leaves = [np.asarray(nn.unbox(x))[:size] if path.endswith(_VOCABULARY_ROWS) else x
              for path, x in named]
    return jax.tree_util.tree_unflatten(treedef, leaves), config.replace(vocab_size=size)


def _few(names: list[str], limit: int = 4) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def param_template(config: BertConfig, heads: bool = False) -> Params:
    """Boxed shapes of BertModel's (or, with heads, BertForPreTraining's) params; no memory."""
    ids = jnp.zeros((1, 1), jnp.int32)
    model = BertForPreTraining(config) if heads else BertModel(config)
    args = (ids, ids, ids, ids) if heads else (ids,)
    return jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *args))["params"]


@dataclasses.dataclass
class LoadReport:
    """What a load did, by bertjax parameter path and checkpoint tensor name."""

    loaded: list[str]
    missing: list[str]  # bertjax parameters the checkpoint lacks (kept as they were)
    unexpected: list[str]  # checkpoint tensors that fit nowhere in the model

    def __str__(self) -> str:
        lines = [f"loaded {len(self.loaded)} parameters"]
        if self.missing:
            lines.append(
                f"kept {len(self.missing)} absent from the checkpoint: {_few(self.missing)}"
            )
        if self.unexpected:
            lines.append(f"ignored {len(self.unexpected)} tensors: {_few(self.unexpected)}")
        return "; ".join(lines)


def _fill(
    state_dict: Mapping[str, Any], template: Params, check_layers: bool
) -> tuple[Params, LoadReport]:
    """`template` with every parameter the checkpoint holds replaced by the checkpoint's."""
    tensors = _normalize(state_dict)
    named, treedef = _flatten(template)
    wanted = {path: _hf_name(path) for path, _ in named}
    shapes = {wanted[p][0]: _hf_shape(wanted[p][1], nn.unbox(leaf).shape) for p, leaf in named}
    checkpoint_dims = _dims({name: t.shape for name, t in tensors.items()})
    if not check_layers:
        checkpoint_dims.pop("num_layers", None)
    _check_dims(checkpoint_dims, _dims(shapes))
    leaves, loaded, missing = [], [], []
    for path, leaf in named:
        name, kind = wanted[path]
        if name not in tensors:
            leaves.append(leaf)
            missing.append(path)
            continue
        value = nn.unbox(leaf)
        if tensors[name].shape != shapes[name]:
            raise ValueError(
                f"checkpoint {name} has shape {tensors[name].shape} but bertjax {path} "
                f"{value.shape} needs {shapes[name]}: build the config from the checkpoint's "
                "config.json (load_hf_config)"
            )
        new = _to_bertjax(kind, tensors[name], value.shape).astype(value.dtype)
        sharding = getattr(value, "sharding", None)
        new = jnp.asarray(new) if sharding is None else jax.device_put(new, sharding)
        leaves.append(leaf.replace_boxed(new) if _is_box(leaf) else new)
        loaded.append(path)
    used = {wanted[path][0] for path in loaded}
    unexpected = sorted(set(tensors) - used - _BUFFERS - set(_TIED))
    return jax.tree_util.tree_unflatten(treedef, leaves), LoadReport(loaded, missing, unexpected)


# ----------------------------------------------------------------------------- public API


def hf_to_bertjax(
    state_dict: Mapping[str, Any], config: BertConfig, heads: bool = False
) -> dict[str, Any]:
    """Plain params of BertModel(config), or of BertForPreTraining(config) with `heads`.

    Exact: every parameter must be in the checkpoint and every tensor must be used (the
    pretraining heads are dropped when `heads` is False).
    """
    params, report = _fill(state_dict, param_template(config, heads), check_layers=True)
    model = "BertForPreTraining" if heads else "BertModel"
    if report.missing:
        lacking = [_hf_name(path)[0] for path in report.missing]
        fix = (
            "pass heads=False for the encoder, or load_pretrained(path, initialised_params) "
            "to keep initialised heads"
            if heads and all(name.startswith("cls.") for name in lacking)
            else "pass a complete BERT checkpoint"
        )
        raise ValueError(f"checkpoint lacks {_few(lacking)} needed by {model}: {fix}")
    unexpected = [n for n in report.unexpected if heads or not n.startswith("cls.")]
    if unexpected:
        raise ValueError(
            f"checkpoint tensors {_few(unexpected)} fit nowhere in bertjax {model}: "
            "use load_pretrained to load the rest and skip them"
        )
    return nn.unbox(params)


def load_hf_bert(
    path: PathLike, heads: bool = False, **overrides: Any
) -> tuple[BertConfig, dict[str, Any]]:
    """(config, plain params) of a checkpoint directory or file with config.json beside it.

    The exact conversion of `hf_to_bertjax`; `overrides` set BertConfig fields such as dtype.
    """
    config = load_hf_config(path, **overrides)
    state_dict = load_hf_state_dict(path)
    try:
        return config, hf_to_bertjax(state_dict, config, heads)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def hf_shapes(config: BertConfig, heads: bool = False) -> dict[str, tuple[int, ...]]:
    """{transformers name: shape} of BertModel(config) (bare names), or with `heads` of
    BertForPreTraining(config) (`bert.`/`cls.` names, tied decoder left out); no memory."""
    shapes = {}
    for path, leaf in _flatten(param_template(config, heads))[0]:
        name, kind = _hf_name(path)
        name = f"bert.{name}" if heads and not name.startswith("cls.") else name
        shapes[name] = _hf_shape(kind, nn.unbox(leaf).shape)
    return shapes


def fill_pretrained(state_dict: Mapping[str, Any], params: Params) -> tuple[Params, LoadReport]:
    """`load_pretrained` for tensors already read (transformers names, bare or prefixed)."""
    return _fill(state_dict, params, check_layers=False)


def load_pretrained(path: PathLike, params: Params) -> tuple[Params, LoadReport]:
    """Fill initialised `params` (BertModel or BertForPreTraining, boxed or not) from a checkpoint.

    Parameters the checkpoint lacks (e.g. pretraining heads of a BertModel checkpoint) keep their
    values; tensors that fit nowhere are ignored. Both are in the report. Shapes must match, and
    so must the head count when config.json sits beside the checkpoint. Boxes and shardings of
    `params` are kept.
    """
    state_dict = load_hf_state_dict(path)
    try:
        _check_heads(pathlib.Path(path), params)
        filled, report = _fill(state_dict, params, check_layers=False)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    if report.missing or report.unexpected:
        logging.warning("%s: %s", path, report)
    return filled, report


def _check_heads(path: pathlib.Path, params: Params) -> None:
    """The head count is invisible in the weights: compare it with config.json if present."""
    config_file = (path if path.is_dir() else path.parent) / "config.json"
    kernels = [nn.unbox(x) for p, x in _flatten(params)[0] if p.endswith("query_kernel")]
    if not config_file.is_file() or not kernels:
        return
    heads = json.loads(config_file.read_text()).get("num_attention_heads")
    if heads is not None and heads != kernels[0].shape[1]:
        raise ValueError(
            f"config.json num_attention_heads {heads} != model num_heads "
            f"{kernels[0].shape[1]}: set bert_config.num_heads={heads}"
        )


def bertjax_to_hf(params: Params, config: BertConfig) -> dict[str, np.ndarray]:
    """transformers-named tensors of BertModel or BertForPreTraining params (the inverse).

    BertModel params give bare names (transformers.BertModel); BertForPreTraining params give
    `bert.`/`cls.` names including the tied decoder, so `load_state_dict(strict=True)` works.
    """
    heads = "bert" in params
    template = {p: nn.unbox(x).shape for p, x in _flatten(param_template(config, heads))[0]}
    given = {p: np.asarray(nn.unbox(x)) for p, x in _flatten(params)[0]}
    if set(given) != set(template):
        odd = sorted(set(given) ^ set(template))
        raise ValueError(
            f"params differ from {'BertForPreTraining' if heads else 'BertModel'}(config) at "
            f"{_few(odd)}: pass the config the params were built with"
        )
    tensors = {}
    for path, value in given.items():
        if value.shape != template[path]:
            raise ValueError(
                f"bertjax {path} has shape {value.shape} but the config gives {template[path]}: "
                "pass the config the params were built with"
            )
        name, kind = _hf_name(path)
        name = f"bert.{name}" if heads and not name.startswith("cls.") else name
        tensors[name] = np.array(_to_hf(kind, value), order="C")  # owned, writable
    if heads:
        for tied, source in _TIED.items():
            prefix = "" if source.startswith("cls.") else "bert."
            tensors[tied] = tensors[prefix + source].copy()
    return tensors


# ----------------------------------------------------------------------------- heads and config

# bertjax.finetune.heads.bert head kind: (transformers class, bertjax head, transformers head,
# whether the transformers class has the pooler)
HEAD_CLASSES = {
    "classify": ("BertForSequenceClassification", "classifier", "classifier", True),
    "regress": ("BertForSequenceClassification", "classifier", "classifier", True),
    "choice": ("BertForMultipleChoice", "classifier", "classifier", True),
    "tag": ("BertForTokenClassification", "classifier", "classifier", False),
    "span": ("BertForQuestionAnswering", "span", "qa_outputs", False),
}
_ACTIVATION_NAMES = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


def head_to_hf(params: Params, config: BertConfig, kind: str) -> dict[str, np.ndarray]:
    """transformers-named tensors of a fine-tuned BertHead of `kind` (HEAD_CLASSES): the
    encoder under `bert.` (without the pooler where the transformers class has none) and the
    head's Dense as a torch Linear ([out, in])."""
    if kind not in HEAD_CLASSES:
        raise ValueError(f"unknown head {kind!r}: export one of {', '.join(HEAD_CLASSES)}")
    architecture, ours, theirs, pooler = HEAD_CLASSES[kind]
    extra = sorted(set(params) - {"bert", ours})
    if extra:
        raise ValueError(f"the {kind} head has parameters {', '.join(extra)} that "
                         f"{architecture} lacks: export the encoder alone")
    encoder = bertjax_to_hf(params["bert"], config)
    tensors = {f"bert.{name}": value for name, value in encoder.items()
               if pooler or not name.startswith("pooler.")}
    head = {k: np.asarray(nn.unbox(v)) for k, v in params[ours].items()}
    tensors[f"{theirs}.weight"] = np.array(head["kernel"].T, order="C")
    tensors[f"{theirs}.bias"] = np.array(head["bias"], order="C")
    return tensors


def hf_config(config: BertConfig, architecture: str, **extra: Any) -> dict[str, Any]:
    """The transformers config.json of a bertjax BERT, for `architecture` (BertModel,
    BertForPreTraining, one of HEAD_CLASSES'); `extra` adds keys such as id2label. One line
    for a BERT transformers cannot run the same way (pre-LN blocks, no biases, causal attention)."""
    tcfg = config.transformer
    if config.causal:
        raise ValueError("a left-to-right (causal) BERT has no transformers counterpart: "
                         "its BertModel attends both ways and pools [CLS]")
    if tcfg.pre_layer_norm:
        raise ValueError("bert_config.pre_layer_norm=True has no transformers BERT "
                         "counterpart (its blocks are post-LN)")
    if not tcfg.use_bias:
        raise ValueError("bert_config.use_bias=False has no transformers BERT counterpart "
                         "(its Dense layers all have biases)")
    if tcfg.activation not in _ACTIVATION_NAMES:
        raise ValueError(f"activation {tcfg.activation!r} has no transformers BERT "
                         f"counterpart: use one of {', '.join(_ACTIVATION_NAMES)}")
    fields = {key: getattr(tcfg if hasattr(tcfg, field) else config, field)
              for field, key in {**_HF_CONFIG, **_HF_CONFIG_OPTIONAL}.items()}
    return {
        "architectures": [architecture],
        "model_type": "bert",
        **fields,
        "hidden_act": _ACTIVATION_NAMES[tcfg.activation],
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
        **extra,
    }
