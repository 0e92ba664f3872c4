"""Google's original BERT checkpoints (google-research/bert) -> bertjax parameters.

A released model is a directory holding `bert_config.json`, `vocab.txt` and a TensorFlow
checkpoint `bert_model.ckpt.index` / `.data-*` (the English, multilingual, Chinese and
whole-word-masking models, the 24 small BERTs, and checkpoints of `run_pretraining.py` such as
`model.ckpt-100000`). Variables are named as in its `modeling.py`:

    bert/embeddings/word_embeddings                       [V, E]
    bert/embeddings/{token_type,position}_embeddings      [T, E], [P, E]
    bert/embeddings/LayerNorm/{gamma,beta}                [E]
    bert/encoder/layer_N/attention/self/query/kernel      [E, E]   (TF kernels are [in, out])
    bert/encoder/layer_N/attention/output/dense/kernel    [E, E]
    bert/encoder/layer_N/intermediate/dense/kernel        [E, M]
    bert/pooler/dense/kernel                              [E, E]
    cls/predictions/transform/dense/kernel, LayerNorm     [E, E], [E]
    cls/predictions/output_bias                           [V]      (decoder tied to embeddings)
    cls/seq_relationship/output_weights, output_bias      [2, E], [2]   ([out, in])

Each variable is renamed to its transformers counterpart (`bert.encoder.layer.N.attention.self.
query.weight`, kernels transposed) and converted by convert/hf_bert.py, so one table of names
serves both. Optimizer slots (`.../adam_m`, `.../adam_v`) and `global_step` are ignored.
Missing or misshapen variables are reported by their TensorFlow names, before any conversion.

The checkpoint is read with TensorFlow's checkpoint reader, imported here only: the model code
never needs TensorFlow. WordPiece's `do_lower_case` is not stored in the checkpoint; it is taken
from the directory name as google-research/bert names its releases (`uncased_*`, `cased_*`,
`multi_cased_*`, `wwm_uncased_*`, ...) or given by the caller, never guessed.
"""

import json
import os
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from bertjax.convert import hf_bert
from bertjax.files import glob_escape
from bertjax.models.bert import BertConfig

PathLike = str | os.PathLike
CONFIG, VOCAB, CHECKPOINT = "bert_config.json", "vocab.txt", "bert_model.ckpt"
_IGNORED = re.compile(r"(^|/)(adam_[mv]|global_step|good_steps|loss_scale)$")  # not the model
# Released models google-research/bert's tokenization.py knows to be lower-cased although
# their names do not say "uncased" (its validate_case_matches_checkpoint).
_LOWER_CASE_RELEASES = ("multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")


class GoogleCheckpointError(ValueError):
    """A directory that is not a usable google-research/bert checkpoint; the message names
    the file or variable and the fix."""


# ----------------------------------------------------------------------------- names


def tf_to_hf_name(name: str) -> tuple[str, bool]:
    """(transformers name, whether the tensor is transposed) of a modeling.py variable name."""
    special = {
        "cls/predictions/output_bias": "cls.predictions.bias",
        "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
        "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
    }
    if name in special:
        return special[name], False
    parts = name.split("/")
    transposed = parts[-1] == "kernel"
    if parts[-1].endswith("_embeddings"):
        parts.append("weight")
    parts[-1] = {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(parts[-1], parts[-1])
    dotted = ".".join(parts)
    return re.sub(r"encoder\.layer_(\d+)\.", r"encoder.layer.\1.", dotted), transposed


def hf_to_tf_name(name: str) -> str:
    """The modeling.py variable name of a transformers BertForPreTraining tensor name."""
    special = {
        "cls.predictions.bias": "cls/predictions/output_bias",
        "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
        "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
    }
    if name in special:
        return special[name]
    name = re.sub(r"encoder\.layer\.(\d+)\.", r"encoder.layer_\1.", name)
    parts = name.split(".")
    if parts[-2].endswith("_embeddings"):
        return "/".join(parts[:-1])
    last = {"weight": "gamma" if parts[-2] == "LayerNorm" else "kernel",
            "bias": "beta" if parts[-2] == "LayerNorm" else "bias"}[parts[-1]]
    return "/".join([*parts[:-1], last])


def expected_variables(config: BertConfig, heads: bool) -> dict[str, tuple[int, ...]]:
    """{modeling.py name: shape} of the variables BertModel (or with `heads`,
    BertForPreTraining) of `config` reads from a checkpoint (shapes only, no memory)."""
    expected = {}
    for name, shape in hf_bert.hf_shapes(config, heads=True).items():
        if heads or not name.startswith("cls."):
            tf_name = hf_to_tf_name(name)
            expected[tf_name] = shape[::-1] if tf_to_hf_name(tf_name)[1] else shape
    return expected


# ----------------------------------------------------------------------------- files


def is_google_checkpoint(path: PathLike) -> bool:
    """True for a directory holding a TensorFlow checkpoint index or a bert_config.json."""
    path = pathlib.Path(path)
    return path.is_dir() and ((path / CONFIG).is_file() or bool(list(path.glob("*.index"))))


def checkpoint_prefix(directory: pathlib.Path) -> pathlib.Path:
    """The checkpoint prefix in `directory`: bert_model.ckpt, else the one *.index there."""
    if (directory / f"{CHECKPOINT}.index").is_file():
        return directory / CHECKPOINT
    indexes = sorted(directory.glob("*.index"))
    if len(indexes) == 1:
        return indexes[0].with_suffix("")
    if not indexes:
        raise GoogleCheckpointError(f"{directory}: holds no TensorFlow checkpoint "
                                    f"({CHECKPOINT}.index): pass the directory of a "
                                    "google-research/bert model")
    names = ", ".join(p.name for p in indexes[:4])
    raise GoogleCheckpointError(f"{directory}: holds several checkpoints ({names}): keep one, "
                                f"or name it {CHECKPOINT}")


def load_google_config(directory: PathLike, **overrides: Any) -> BertConfig:
    """The BertConfig of DIRECTORY/bert_config.json."""
    directory = pathlib.Path(directory)
    file = directory / CONFIG
    if not file.is_file():
        raise GoogleCheckpointError(f"{directory}: has no {CONFIG}: put the bert_config.json "
                                    "released with this checkpoint beside it")
    try:
        return hf_bert.config_from_hf(json.loads(file.read_text(encoding="utf-8")), **overrides)
    except json.JSONDecodeError as e:
        raise GoogleCheckpointError(f"{file}: not valid JSON ({e}): restore the released "
                                    "file") from None
    except ValueError as e:
        raise GoogleCheckpointError(f"{file}: {e}") from None


def lower_case_of(directory: PathLike, lower_case: bool | None = None) -> bool:
    """do_lower_case for a released model: `lower_case` if given, else its directory name's."""
    if lower_case is not None:
        return bool(lower_case)
    name = pathlib.Path(directory).resolve().name
    if "uncased" in name.lower() or name in _LOWER_CASE_RELEASES:
        return True
    if "cased" in name.lower():
        return False
    raise GoogleCheckpointError(
        f"{directory}: its name says neither 'uncased' nor 'cased', so do_lower_case is "
        "unknown: pass --do_lower_case=true for an uncased model, --do_lower_case=false for a "
        "cased one (lower_case= in Python)")


def read_variables(prefix: PathLike) -> dict[str, np.ndarray]:
    """The model variables of a TensorFlow checkpoint (optimizer slots left out)."""
    import tensorflow as tf  # noqa: PLC0415 - only this reader needs TensorFlow

    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except (tf.errors.OpError, ValueError) as e:
        raise GoogleCheckpointError(f"{prefix}: not a readable TensorFlow checkpoint "
                                    f"({str(e).splitlines()[0][:160]}): pass the released "
                                    ".index and .data-* files together") from None
    data = _data_files(pathlib.Path(prefix))
    names = [n for n in reader.get_variable_to_shape_map() if not _IGNORED.search(n)]
    try:
        return {name: np.asarray(reader.get_tensor(name)) for name in sorted(names)}
    except Exception as e:  # noqa: BLE001 - TensorFlow's errors, IndexError on a short file
        where = data[0] if len(data) == 1 else f"{prefix}.data-*"
        raise GoogleCheckpointError(f"{where}: cannot be read ({_first_line(e)}): it is "
                                    "truncated or damaged; download the model again") from None


def _data_files(prefix: pathlib.Path) -> list[pathlib.Path]:
    """The checkpoint's .data-NNNNN-of-MMMMM shards, all of them, or one line naming the
    first missing (TensorFlow itself fails in a 54-line traceback)."""
    shards = sorted(prefix.parent.glob(f"{glob_escape(prefix.name)}.data-*-of-*"))
    total = int(shards[0].name.rsplit("-of-", 1)[1]) if shards else 1
    expected = [prefix.parent / f"{prefix.name}.data-{i:05d}-of-{total:05d}"
                for i in range(total)]
    missing = [p for p in expected if not p.is_file()]
    if missing:
        raise GoogleCheckpointError(f"{missing[0]} is missing: it holds the weights "
                                    f"{prefix.name}.index lists; put it beside the .index "
                                    "(download the model again)")
    return expected


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:160] if text else type(err).__name__


# ----------------------------------------------------------------------------- conversion


def _check_variables(variables: Mapping[str, np.ndarray], config: BertConfig, heads: bool,
                     where: str) -> None:
    expected = expected_variables(config, heads)
    for name, shape in expected.items():
        if name not in variables:
            fix = ("pass a pretraining checkpoint (with cls/), or heads=False for the encoder"
                   if name.startswith("cls/") else "pass a complete google-research/bert "
                   "checkpoint with its own bert_config.json")
            raise GoogleCheckpointError(f"{where}: variable {name} is missing: {fix}")
        found = tuple(variables[name].shape)
        if found != shape:
            raise GoogleCheckpointError(
                f"{where}: variable {name} has shape {list(found)} but {CONFIG} gives "
                f"{list(shape)}: pass the bert_config.json released with this checkpoint")
    unknown = [n for n in variables if n not in expected
               and not (n.startswith("cls/") and not heads)]
    if unknown:
        raise GoogleCheckpointError(f"{where}: variable {unknown[0]} fits nowhere in a BERT of "
                                    f"{CONFIG}: pass a google-research/bert BERT checkpoint")


def to_hf_state_dict(variables: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """transformers-named tensors (`bert.`/`cls.` prefixes) of modeling.py variables."""
    tensors = {}
    for name, value in variables.items():
        hf_name, transposed = tf_to_hf_name(name)
        tensors[hf_name] = np.ascontiguousarray(value.T if transposed else value)
    return tensors


def google_to_bertjax(variables: Mapping[str, np.ndarray], config: BertConfig,
                      heads: bool = False, where: str = "checkpoint") -> dict[str, Any]:
    """Plain params of BertModel(config), or of BertForPreTraining(config) with `heads`,
    from modeling.py variables; every variable the model needs must be there, shaped as the
    config says (the first that is not is named)."""
    _check_variables(variables, config, heads, where)
    tensors = to_hf_state_dict({n: v for n, v in variables.items()
                                if heads or not n.startswith("cls/")})
    return hf_bert.hf_to_bertjax(tensors, config, heads)


def load_google_bert(directory: PathLike, heads: bool = False, **overrides: Any
                     ) -> tuple[BertConfig, dict[str, Any]]:
    """(config, plain params) of a google-research/bert model directory; `overrides` set
    BertConfig fields such as the compute dtype."""
    directory = pathlib.Path(directory)
    config = load_google_config(directory, **overrides)
    prefix = checkpoint_prefix(directory)
    params = google_to_bertjax(read_variables(prefix), config, heads, str(prefix))
    return config, params
