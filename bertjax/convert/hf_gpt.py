"""Hugging Face GPT-2 (GPT2LMHeadModel) and OpenAI GPT (OpenAIGPTLMHeadModel) -> bertjax GptLM.

Both use Conv1D layers whose weights are [in, out] (flax's layout, no transpose), and a fused
query/key/value projection c_attn [E, 3E] = [q | k | v], each split into heads as (H, D):

    transformer.wte / tokens_embed.weight       [V, E]  token_embeddings/embedding
    transformer.wpe / positions_embed.weight    [P, E]  position_embeddings/embedding
    transformer.h.{i}.attn.c_attn.weight        [E, 3E] transformer/layer_{i}/attention/
                                                          {query,key,value}_kernel (E, H, D)
    transformer.h.{i}.attn.c_proj.weight        [E, E]  .../attention/out_kernel (H, D, E)
    transformer.h.{i}.ln_1 / ln_2               [E]     .../attention_layer_norm / mlp_layer_norm
    transformer.h.{i}.mlp.c_fc / c_proj.weight  [E, M] / [M, E]   .../mlp/wi / wo kernel
    transformer.ln_f (GPT-2 only)               [E]     transformer/final_layer_norm
    lm_head.weight                              tied to the token embeddings: checked, not stored

ln_1 is the LayerNorm before attention in GPT-2 (pre-LN) and after it in GPT (post-LN); the
stack's `pre_layer_norm` decides, so the names map one to one. Import with `load_hf_gpt(dir)`
or `hf_to_bertjax(state_dict, config)`; the head count comes from config.json.
"""

import json
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from bertjax.convert.hf_bert import load_hf_state_dict
from bertjax.models.gpt import GptConfig

PathLike = str | os.PathLike
_ACTIVATIONS = {  # family: config.json activation -> bertjax activation
    "gpt2": {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
             "relu": "relu"},
    "openai-gpt": {"gelu": "gelu_tanh", "relu": "relu"},  # its "gelu" is the tanh form
}
_NAMES = {  # family: (token embeddings, position embeddings, final LayerNorm or None)
    "gpt2": ("wte", "wpe", "ln_f"),
    "openai-gpt": ("tokens_embed", "positions_embed", None),
}
_BUFFERS = re.compile(r"(^|\.)(attn\.(bias|masked_bias)|position_ids)$")


def config_from_hf(config_json: Mapping[str, Any], **overrides: Any) -> GptConfig:
    """A GptConfig from a GPT-2 or OpenAI GPT config.json dict."""
    family = config_json.get("model_type")
    if family not in _NAMES:
        raise ValueError(f"config.json model_type={family!r} is not gpt2 or openai-gpt: pass a "
                         "GPT-2 or OpenAI GPT checkpoint")
    act_key = "activation_function" if family == "gpt2" else "afn"
    act = config_json.get(act_key, "gelu_new" if family == "gpt2" else "gelu")
    if act not in _ACTIVATIONS[family]:
        raise ValueError(f"config.json {act_key}={act!r} is not supported: use one of "
                         f"{', '.join(_ACTIVATIONS[family])}")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if config_json.get(flag):
            raise ValueError(f"config.json {flag}=true is not supported: convert checkpoints "
                             "with the standard GPT-2 attention")
    hidden = int(config_json["n_embd"])
    fields = dict(
        vocab_size=int(config_json["vocab_size"]),
        hidden_size=hidden,
        num_layers=int(config_json["n_layer"]),
        num_heads=int(config_json["n_head"]),
        mlp_dim=int(config_json.get("n_inner") or 4 * hidden),
        max_position_embeddings=int(config_json["n_positions"]),
        pre_layer_norm=family == "gpt2",
        scale_residual_init=family == "gpt2",
        activation=_ACTIVATIONS[family][act],
        dropout_rate=float(config_json.get("resid_pdrop", 0.1)),
        attention_dropout_rate=float(config_json.get("attn_pdrop", 0.1)),
        layer_norm_eps=float(config_json.get("layer_norm_epsilon", 1e-5)),
        initializer_range=float(config_json.get("initializer_range", 0.02)),
    )
    if hidden % fields["num_heads"]:
        raise ValueError(f"config.json n_embd {hidden} is not divisible by n_head "
                         f"{fields['num_heads']}: fix the config")
    return GptConfig.from_dict(fields | overrides)


def _family(config: GptConfig) -> str:
    return "gpt2" if config.transformer.pre_layer_norm else "openai-gpt"


def _bare(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Names without the `transformer.` prefix, buffers dropped, tensors as float32 numpy."""
    out = {}
    for name, value in state_dict.items():
        if _BUFFERS.search(name):
            continue
        out[name.removeprefix("transformer.")] = np.asarray(value, np.float32)
    return out


def hf_to_bertjax(state_dict: Mapping[str, Any], config: GptConfig) -> dict[str, Any]:
    """bertjax GptLM params from a GPT-2 / OpenAI GPT state dict (every tensor must be used)."""
    tcfg = config.transformer
    if tcfg.scan_layers:
        raise ValueError("gpt_config.scan_layers=True stacks the layers, Hugging Face names "
                         "each one: convert with scan_layers=False")
    tensors = _bare(state_dict)
    wte, wpe, ln_f = _NAMES[_family(config)]
    E, H, D = tcfg.hidden_size, tcfg.num_heads, tcfg.head_dim
    used: set[str] = set()

    def take(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"checkpoint lacks {name}: pass a {_family(config)} checkpoint "
                             f"with {tcfg.num_layers} layers")
        if tensors[name].shape != shape:
            raise ValueError(f"checkpoint {name} has shape {tensors[name].shape}, the config "
                             f"needs {shape}: pass the config.json of this checkpoint")
        used.add(name)
        return tensors[name]

    def layer_norm(name: str) -> dict[str, np.ndarray]:
        return {"scale": take(f"{name}.weight", (E,)), "bias": take(f"{name}.bias", (E,))}

    stack: dict[str, Any] = {}
    for i in range(tcfg.num_layers):
        p = f"h.{i}"
        qkv_w = take(f"{p}.attn.c_attn.weight", (E, 3 * E)).reshape(E, 3, H, D)
        qkv_b = take(f"{p}.attn.c_attn.bias", (3 * E,)).reshape(3, H, D)
        attention = {f"{n}_kernel": qkv_w[:, j] for j, n in enumerate(("query", "key", "value"))}
        attention |= {f"{n}_bias": qkv_b[j] for j, n in enumerate(("query", "key", "value"))}
        attention["out_kernel"] = take(f"{p}.attn.c_proj.weight", (E, E)).reshape(H, D, E)
        attention["out_bias"] = take(f"{p}.attn.c_proj.bias", (E,))
        M = tcfg.mlp_dim
        stack[f"layer_{i}"] = {
            "attention": attention,
            "attention_layer_norm": layer_norm(f"{p}.ln_1"),
            "mlp_layer_norm": layer_norm(f"{p}.ln_2"),
            "mlp": {
                "wi": {"kernel": take(f"{p}.mlp.c_fc.weight", (E, M)),
                       "bias": take(f"{p}.mlp.c_fc.bias", (M,))},
                "wo": {"kernel": take(f"{p}.mlp.c_proj.weight", (M, E)),
                       "bias": take(f"{p}.mlp.c_proj.bias", (E,))},
            },
        }
    if ln_f is not None:
        stack["final_layer_norm"] = layer_norm(ln_f)
    embeddings = take(f"{wte}.weight", (config.vocab_size, E))
    params = {
        "token_embeddings": {"embedding": embeddings},
        "position_embeddings": {
            "embedding": take(f"{wpe}.weight", (config.max_position_embeddings, E))},
        "transformer": stack,
    }
    head = tensors.get("lm_head.weight")
    if head is not None:
        if head.shape != embeddings.shape or not np.array_equal(head, embeddings):
            raise ValueError("checkpoint lm_head.weight differs from the token embeddings: "
                             "bertjax GPT ties them; pass a checkpoint with tied embeddings")
        used.add("lm_head.weight")
    unused = sorted(set(tensors) - used)
    if unused:
        raise ValueError(f"checkpoint has tensors the config does not use ({', '.join(unused[:4])}"
                         f"{', ...' if len(unused) > 4 else ''}): pass its own config.json")
    return params


def load_hf_gpt(path: PathLike, **overrides: Any) -> tuple[GptConfig, dict[str, Any]]:
    """(config, params) of a Hugging Face GPT-2 / OpenAI GPT directory (config.json + weights)."""
    directory = pathlib.Path(path)
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file}: no such file: pass a Hugging Face model "
                                "directory holding config.json")
    try:
        config = config_from_hf(json.loads(config_file.read_text()), **overrides)
    except ValueError as e:
        raise ValueError(f"{config_file}: {e}") from None
    return config, hf_to_bertjax(load_hf_state_dict(directory), config)


# ----------------------------------------------------------------------------- export

_ARCHITECTURES = {  # family: (LM head class, bare transformer class)
    "gpt2": ("GPT2LMHeadModel", "GPT2Model"),
    "openai-gpt": ("OpenAIGPTLMHeadModel", "OpenAIGPTModel"),
}


def cut_vocabulary(params: Mapping[str, Any], config: GptConfig, size: int
                   ) -> tuple[Mapping[str, Any], GptConfig]:
    """GptLM `params` and `config` with the token table (tied to the LM head) cut to its
    first `size` rows, the ids the tokenizer has (as hf_bert.cut_vocabulary does for BERT)."""
    if size >= config.vocab_size:
        return params, config
    table = np.asarray(params["token_embeddings"]["embedding"])[:size]
    return ({**params, "token_embeddings": {"embedding": table}},
            config.replace(vocab_size=size))


def bertjax_to_hf(params: Mapping[str, Any], config: GptConfig, lm_head: bool = True
                  ) -> dict[str, np.ndarray]:
    """transformers-named tensors of GptLM params (the inverse of `hf_to_bertjax`): GPT-2's
    GPT2LMHeadModel (OpenAI GPT's OpenAIGPTLMHeadModel) names with the tied `lm_head.weight`,
    or without `lm_head` the bare GPT2Model / OpenAIGPTModel names."""
    tcfg = config.transformer
    if tcfg.scan_layers or "layers" in params.get("transformer", {}):
        raise ValueError("scanned GPT params stack the layers: un-stack them first "
                         "(bertjax.convert.export.unstack_layers)")
    wte, wpe, ln_f = _NAMES[_family(config)]
    E = tcfg.hidden_size
    stack = params["transformer"]
    out: dict[str, np.ndarray] = {}

    def put(name: str, value: npt.ArrayLike) -> None:
        out[name] = np.array(value, order="C")  # owned and contiguous, as safetensors wants

    for i in range(tcfg.num_layers):
        layer, p = stack[f"layer_{i}"], f"h.{i}"
        attention = layer["attention"]
        qkv = [np.asarray(attention[f"{n}_kernel"]).reshape(E, E) for n in ("query", "key",
                                                                          "value")]
        put(f"{p}.attn.c_attn.weight", np.concatenate(qkv, axis=1))
        put(f"{p}.attn.c_attn.bias", np.concatenate(
            [np.asarray(attention[f"{n}_bias"]).reshape(E) for n in ("query", "key", "value")]))
        put(f"{p}.attn.c_proj.weight", np.asarray(attention["out_kernel"]).reshape(E, E))
        put(f"{p}.attn.c_proj.bias", attention["out_bias"])
        for ours, theirs in (("attention_layer_norm", "ln_1"), ("mlp_layer_norm", "ln_2")):
            put(f"{p}.{theirs}.weight", layer[ours]["scale"])
            put(f"{p}.{theirs}.bias", layer[ours]["bias"])
        for ours, theirs in (("wi", "c_fc"), ("wo", "c_proj")):
            put(f"{p}.mlp.{theirs}.weight", layer["mlp"][ours]["kernel"])
            put(f"{p}.mlp.{theirs}.bias", layer["mlp"][ours]["bias"])
    if ln_f is not None:
        put(f"{ln_f}.weight", stack["final_layer_norm"]["scale"])
        put(f"{ln_f}.bias", stack["final_layer_norm"]["bias"])
    put(f"{wte}.weight", params["token_embeddings"]["embedding"])
    put(f"{wpe}.weight", params["position_embeddings"]["embedding"])
    if not lm_head:
        return out
    tensors = {f"transformer.{name}": value for name, value in out.items()}
    tensors["lm_head.weight"] = tensors[f"transformer.{wte}.weight"].copy()
    return tensors


def hf_config(config: GptConfig, lm_head: bool = True, **extra: Any) -> dict[str, Any]:
    """The transformers config.json of a bertjax GPT: GPT-2 (pre-LN) or OpenAI GPT (post-LN);
    `extra` adds keys such as bos_token_id. One line for an activation transformers lacks, or
    for a model without biases (transformers' GPT layers all have them)."""
    tcfg, family = config.transformer, _family(config)
    if not tcfg.use_bias:
        raise ValueError(f"gpt_config.use_bias=False has no transformers {family} counterpart "
                         "(its layers all have biases): export a model trained with biases")
    names = {act: key for key, act in _ACTIVATIONS[family].items()}
    names.update({"gelu_tanh": "gelu_new"} if family == "gpt2" else {})
    if tcfg.activation not in names:
        raise ValueError(f"activation {tcfg.activation!r} has no transformers {family} "
                         f"counterpart: use one of {', '.join(sorted(names))}")
    common = dict(vocab_size=config.vocab_size, n_positions=config.max_position_embeddings,
                  n_embd=tcfg.hidden_size, n_layer=tcfg.num_layers, n_head=tcfg.num_heads,
                  resid_pdrop=tcfg.dropout_rate, embd_pdrop=tcfg.dropout_rate,
                  attn_pdrop=tcfg.attention_dropout_rate, layer_norm_epsilon=tcfg.layer_norm_eps,
                  initializer_range=tcfg.initializer_range)
    if family == "gpt2":
        own = dict(n_inner=tcfg.mlp_dim, activation_function=names[tcfg.activation])
    else:
        if tcfg.mlp_dim != 4 * tcfg.hidden_size:
            raise ValueError(f"mlp_dim {tcfg.mlp_dim} != 4 * hidden_size: transformers' OpenAI "
                             "GPT has no setting for another MLP width")
        own = dict(afn=names[tcfg.activation])
    architecture = _ARCHITECTURES[family][0 if lm_head else 1]
    return {"architectures": [architecture], "model_type": family, **common, **own,
            "tie_word_embeddings": True, **extra}
