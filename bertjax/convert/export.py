"""A bertjax run's model as files other software reads (`bertjax-export`, or `export(...)`).

    workdir objective            --format=hf                     with encoder_only
    bert_pretraining             BertForPreTraining              BertModel
    bert_classify / bert_regress BertForSequenceClassification   BertModel
    bert_choice                  BertForMultipleChoice           BertModel
    bert_tag                     BertForTokenClassification      BertModel
    bert_span (SQuAD)            BertForQuestionAnswering        BertModel
    gpt_pretraining              GPT2LMHeadModel (GPT-2) or      GPT2Model / OpenAIGPTModel
                                 OpenAIGPTLMHeadModel (GPT)
    elmo_pretraining             --format=bilm: options.json + weights.hdf5 (bilm-tf's layout)

--format=hf writes config.json, model.safetensors and the tokenizer's files, which
transformers' AutoConfig / AutoModel* / AutoTokenizer `from_pretrained(DIR)` load with no
missing or unexpected weights. Models with no transformers counterpart (a left-to-right BERT,
a BERT head behind a BiLSTM or reading the mean of its tokens (finetune.pooling = 'mean'),
BERT's feature-based tagger, a GPT fine-tuning head, an ELMo task model) are refused in one
line naming what can be exported instead: their pretrained encoder, with encoder_only (a GPT
fine-tuning run's keeps the three task tokens it learned, as added tokens of its tokenizer).

The checkpoint read is a fine-tuning run's best (WORKDIR/best) by default, else the newest;
WORKDIR/checkpoints/STEP names one. Layers trained with scan_layers=True are un-stacked, and
weights are written in float32 (whatever they were trained in) unless `dtype` says otherwise.
Nothing is written to `out` until the export is complete: files are staged and moved into
place, so a failed export leaves `out` as it was; `out` may be local or gs://, never a run's
directory, and --overwrite replaces only the files export writes (convert/destination.py).
"""

import dataclasses
import json
import os
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import save_file

from bertjax import files
from bertjax.convert import destination, elmo_hdf5, hf_bert, hf_gpt, hf_tokenizer, scan
from bertjax.models.bert import BertConfig
from bertjax.models.sizes import FamilyConfig
from bertjax.training import families
from bertjax.training import workdir as workdir_lib
from bertjax.training.checkpoint import resolve, restore_saved_params
from bertjax.training.families import Refusal
from bertjax.training.workdir import TASK_RECORD, read_task_record, recorded_head
from bertjax.typing import Params

FORMATS = ("hf", "bilm")
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
GPT_TASK_TOKENS = ("<|start|>", "<|delimiter|>", "<|extract|>")  # heads/gpt.py SpecialTokens order


class ExportError(ValueError):
    """A checkpoint, format or destination that cannot be exported; the message says why
    and what to do instead."""


@dataclasses.dataclass(frozen=True)
class Trained:
    """A run's model as saved: its records, config (layers unscanned) and numpy params."""

    workdir: pathlib.Path
    which: str  # "best" or "step N"
    record: dict[str, Any]  # model.json
    task: dict[str, Any] | None  # task.json of a fine-tuning run
    config: FamilyConfig
    params: Params

    @property
    def objective(self) -> str:
        return self.record.get("objective", "")

    @property
    def role(self) -> workdir_lib.Role:
        """What the run trained, as its record says (training/workdir.py)."""
        return workdir_lib.role(self.record["family"], self.objective)

    @property
    def fine_tuned(self) -> bool:
        return not self.role.pretrains

    def tokenizer(self) -> dict[str, Any]:
        """The tokenizer record (files relative to the workdir) of the run."""
        record = (self.task or {}) if self.fine_tuned else self.record
        found = record.get("tokenizer")
        if not found or not found.get("files"):
            raise ExportError(f"{self.workdir} records no tokenizer files: rerun the run's "
                              "command with this version of bertjax (it resumes and records "
                              "them)")
        return found


@dataclasses.dataclass(frozen=True)
class Exported:
    """What an export wrote: the directory, the model class it holds and its files."""

    out: pathlib.Path
    model: str
    files: tuple[str, ...]
    source: str


# ----------------------------------------------------------------------------- reading


def read_run_record(checkpoint: str | os.PathLike) -> tuple[pathlib.Path, dict[str, Any]]:
    """(workdir, model.json) of a workdir or WORKDIR/checkpoints[/STEP], read before any
    weights so a wrong format or model fails at once."""
    workdir, _ = resolve(checkpoint)
    if not (workdir / workdir_lib.RECORD).is_file():
        raise ExportError(f"{checkpoint} has no {workdir_lib.RECORD}: pass the --workdir of a "
                          "bertjax-train or bertjax-finetune run")
    return workdir, workdir_lib.read_record(workdir)


def load_trained(checkpoint: str | os.PathLike, best: bool = True) -> Trained:
    """The model a workdir (or WORKDIR/checkpoints/STEP) holds, as saved."""
    _, record = read_run_record(checkpoint)
    params, workdir, which = restore_saved_params(checkpoint, best=best)
    params = jax.device_get(params)
    config = workdir_lib.model_config(record)
    if hasattr(config, "transformer") and config.transformer.scan_layers:
        params, config = scan.unstack_layers(params), config.replace(scan_layers=False)
    return Trained(workdir, which, record, read_task_record(workdir), config, params)


def _cast(tensors: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """Floating tensors in `dtype` (through float32, so bfloat16 widens exactly)."""
    def cast(t: np.ndarray) -> np.ndarray:
        floating = t.dtype.kind == "f" or t.dtype == ml_dtypes.bfloat16
        return np.ascontiguousarray(t.astype(np.float32).astype(DTYPES[dtype]) if floating
                                    else t)

    return {name: cast(np.asarray(t)) for name, t in tensors.items()}


# ----------------------------------------------------------------------------- BERT


def _bert_kind(trained: Trained, encoder_only: bool) -> str | None:
    """The head to export (a recorded head name, hf_bert.HEAD_CLASSES), "pretraining", or
    None: the encoder alone."""
    role = trained.role
    if role.kind == "ltr_pretraining":
        raise ExportError(f"{trained.workdir} holds a left-to-right BERT (bert_ltr_pretraining): "
                          "transformers' BERT attends both ways, so it has no counterpart")
    if encoder_only:
        return None
    if role.kind == "pretraining":
        return "pretraining"
    if role.kind == "features" or "bilstm" in trained.params:
        what = ("BERT's feature-based tagger (a BiLSTM on frozen layers)"
                if role.kind == "features" else f"a {role.name} head behind a BiLSTM")
        raise ExportError(f"{trained.workdir} holds {what}, which has no transformers "
                          "counterpart: export its BERT encoder alone with --encoder_only")
    pooling = recorded_head(trained.task)["pooling"]
    if pooling != "cls":  # only the sentence heads take another (heads/bert.py)
        raise ExportError(f"{trained.workdir} holds a {role.name} head reading the {pooling} of "
                          f"its tokens (finetune.pooling = {pooling!r}), which transformers' "
                          "heads (the pooled [CLS]) cannot rebuild: export its BERT encoder "
                          "alone with --encoder_only")
    if role.name not in hf_bert.HEAD_CLASSES:
        raise ExportError(f"{trained.workdir}: objective {trained.objective!r} has no "
                          "transformers counterpart: export its BERT encoder alone with "
                          "--encoder_only")
    return role.name


def _bert_label_config(trained: Trained, kind: str) -> dict[str, Any]:
    if kind == "regress":
        return {"num_labels": 1, "problem_type": "regression",
                "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
    if kind not in ("classify", "tag"):
        return {}
    labels = (trained.task or {}).get("labels")
    count = np.shape(trained.params["classifier"]["kernel"])[-1]
    if not labels:
        raise ExportError(f"{trained.workdir} has no {TASK_RECORD} with the label names: rerun "
                          "its bertjax-finetune command with this version of bertjax (it "
                          "resumes and records them)")
    if len(labels) != count:
        raise ExportError(f"{trained.workdir / TASK_RECORD} names {len(labels)} labels but the "
                          f"head has {count} outputs: rerun its bertjax-finetune command")
    extra: dict[str, Any] = {"id2label": {str(i): name for i, name in enumerate(labels)},
                             "label2id": {name: i for i, name in enumerate(labels)}}
    if kind == "classify":
        extra["problem_type"] = "single_label_classification"
    return extra


def _bert_files(trained: Trained, encoder_only: bool) -> tuple[str, dict, dict, Callable]:
    """(model class, tensors, config.json, tokenizer writer) of a BERT run; the token table
    holds the vocabulary's rows only (hf_bert.cut_vocabulary)."""
    kind = _bert_kind(trained, encoder_only)
    tokenizer = trained.tokenizer()
    tokens = (trained.workdir / tokenizer["files"]["vocab"]).read_text(encoding="utf-8")
    tokens = tokens.splitlines()
    params, config = hf_bert.cut_vocabulary(trained.params, trained.config, len(tokens))
    if kind is None:
        architecture = "BertModel"
        tensors = hf_bert.bertjax_to_hf(params["bert"], config)
        extra: dict[str, Any] = {}
    elif kind == "pretraining":
        architecture = "BertForPreTraining"
        tensors = hf_bert.bertjax_to_hf(params, config)
        extra = {}
    else:
        architecture = hf_bert.HEAD_CLASSES[kind][0]
        tensors = hf_bert.head_to_hf(params, config, kind)
        extra = _bert_label_config(trained, kind)
    if hf_tokenizer.BERT_SPECIALS["pad_token"] in tokens:
        extra["pad_token_id"] = tokens.index(hf_tokenizer.BERT_SPECIALS["pad_token"])
    try:
        config_json = hf_bert.hf_config(config, architecture, **extra)
    except ValueError as e:
        raise ExportError(f"{trained.workdir}: {e}") from None

    def write_tokenizer(out: pathlib.Path) -> list[str]:
        if tokenizer.get("kind") != "wordpiece":
            raise ExportError(f"{trained.workdir}: a BERT with a {tokenizer.get('kind')!r} "
                              "tokenizer: transformers' BERT tokenizer is WordPiece")
        vocab = files.local_copy(trained.workdir / tokenizer["files"]["vocab"])  # gs:// too
        return hf_tokenizer.write_wordpiece(out, vocab, tokenizer.get("lower_case", True),
                                            config.max_position_embeddings)

    return architecture, tensors, config_json, write_tokenizer


# ----------------------------------------------------------------------------- GPT


def _gpt_files(trained: Trained, encoder_only: bool) -> tuple[str, dict, dict, Callable]:
    """(model class, tensors, config.json, tokenizer writer) of a GPT run; a pretrained GPT's
    token table holds the vocabulary's rows only (hf_gpt.cut_vocabulary), a fine-tuned one's
    also the task tokens after them."""
    config, params = trained.config, trained.params
    tokenizer = trained.tokenizer()
    names = tokenizer["files"]
    vocab = json.loads((trained.workdir / names["vocab"]).read_text(encoding="utf-8"))
    task_tokens: tuple[str, ...] = ()
    if trained.fine_tuned:
        if not encoder_only:
            raise ExportError(f"{trained.workdir} holds a GPT fine-tuning head "
                              f"({trained.objective}), which has no transformers counterpart: "
                              "export its GPT alone with --encoder_only")
        params, task_tokens = params["gpt"], GPT_TASK_TOKENS
    else:
        params, config = hf_gpt.cut_vocabulary(params, config, max(vocab.values()) + 1)
    tensors = hf_gpt.bertjax_to_hf(params, config, lm_head=not encoder_only)
    try:
        config_json = hf_gpt.hf_config(config, lm_head=not encoder_only)
    except ValueError as e:
        raise ExportError(f"{trained.workdir}: {e}") from None
    if hf_tokenizer.END_OF_TEXT in vocab:
        eos = vocab[hf_tokenizer.END_OF_TEXT]
        config_json.update(bos_token_id=eos, eos_token_id=eos)

    def write_tokenizer(out: pathlib.Path) -> list[str]:
        first_task_token = config.vocab_size - len(task_tokens)
        if task_tokens and max(vocab.values()) + 1 != first_task_token:
            raise ExportError(f"{trained.workdir}: the BPE vocabulary ends at id "
                              f"{max(vocab.values())} but the task tokens start at "
                              f"{first_task_token}, so a tokenizer would give them other ids: "
                              "export the pretrained GPT instead")
        return hf_tokenizer.write_bpe(out, files.local_copy(trained.workdir / names["vocab"]),
                                      files.local_copy(trained.workdir / names["merges"]),
                                      config.max_position_embeddings, task_tokens,
                                      openai_gpt=tokenizer.get("kind") == "openai_bpe")

    return config_json["architectures"][0], tensors, config_json, write_tokenizer


# ----------------------------------------------------------------------------- ELMo


def _write_bilm(trained: Trained, out: pathlib.Path, encoder_only: bool) -> list[str]:
    params = trained.params
    if trained.fine_tuned:
        if not encoder_only:
            raise ExportError(f"{trained.workdir} holds an ELMo task model "
                              f"({trained.objective}): bilm-tf's files hold a biLM only; export "
                              "its biLM alone with --encoder_only")
        params = params["bilm"]
    if trained.config.token_encoder != "char_cnn":
        raise ExportError(f"{trained.workdir} holds a word-input ELMo: bilm-tf's layout is "
                          "for character-CNN biLMs (elmo_config.token_encoder='char_cnn')")
    tokenizer = trained.record.get("tokenizer") or {}
    elmo_hdf5.save_bilm_hdf5(trained.config, params, out / "options.json",
                             out / "weights.hdf5", softmax=not trained.fine_tuned,
                             word_tokenizer=tokenizer.get("word_tokenizer"))
    written = ["options.json", "weights.hdf5"]
    vocab = tokenizer.get("files", {}).get("vocab")
    if vocab and (trained.workdir / vocab).is_file():
        shutil.copyfile(files.local_copy(trained.workdir / vocab), out / "vocab.txt")
        written.append("vocab.txt")
    return written


# ----------------------------------------------------------------------------- by family

# each family's writer of every --format (an hf builder gives the files' contents, a bilm
# writer writes them), or a Refusal naming the format it exports to
families.provide("bert", "export", {
    "hf": _bert_files,
    "bilm": Refusal("--format=bilm is ELMo's (bilm-tf) layout: export BERT with --format=hf")})
families.provide("gpt", "export", {
    "hf": _gpt_files,
    "bilm": Refusal("--format=bilm is ELMo's (bilm-tf) layout: export GPT with --format=hf")})
families.provide("elmo", "export", {
    "hf": Refusal("ELMo has no transformers counterpart: export it with --format=bilm"),
    "bilm": _write_bilm})


# ----------------------------------------------------------------------------- writing


def _estimated_bytes(trained: Trained, dtype: str) -> int:
    """About what the exported weights take on disk."""
    width = np.dtype(DTYPES[dtype]).itemsize
    return sum(np.size(x) * width for x in jax.tree.leaves(trained.params))


def export(checkpoint: str | os.PathLike, out: str | os.PathLike, format: str = "hf",
           dtype: str = "float32", encoder_only: bool = False, overwrite: bool = False,
           best: bool = True) -> Exported:
    """Export the model of `checkpoint` (a workdir, or WORKDIR/checkpoints/STEP) into `out`
    (local or gs://): refused when `out` is, holds or lies in a run (destination.py)."""
    if format not in FORMATS:
        raise ExportError(f"unknown --format={format!r}: use hf (transformers) or bilm "
                          "(bilm-tf ELMo)")
    if dtype not in DTYPES:
        raise ExportError(f"unknown --dtype={dtype!r}: use one of {', '.join(DTYPES)}")
    out = files.as_path(out)
    workdir, record = read_run_record(checkpoint)
    with files.reaching(out):  # a gs:// --out that cannot be reached: one line naming it
        destination.check(out, overwrite, workdir)
    family = record["family"]
    writer = families.piece(family, "export")[format]
    if isinstance(writer, Refusal):
        raise ExportError(f"{workdir}: {writer.reason}")
    trained = load_trained(checkpoint, best)
    with destination.staging(out) as staging:
        try:
            model, files_written = _write(trained, staging, format, family, dtype, encoder_only)
            destination.place(staging, out, files_written, overwrite, workdir)
        except (OSError, ValueError, RuntimeError, SafetensorError) as err:
            if not destination.is_no_space(err):
                raise
            raise ExportError(
                f"no space left on the device to write --out={out} (the export takes about "
                f"{_estimated_bytes(trained, dtype) / 2**20:.0f} MiB): free that much or pass "
                f"an --out on a larger disk; {out} is as it was") from None
    return Exported(out, model, tuple(files_written), f"{trained.workdir} ({trained.which})")


def _write(trained: Trained, staging: pathlib.Path, format: str, family: str, dtype: str,
           encoder_only: bool) -> tuple[str, list[str]]:
    """Write the export's files into `staging` with `family`'s writer of `format` (one that
    export() found is not a Refusal); (the model it holds, the file names)."""
    writer = families.piece(family, "export")[format]
    if format == "bilm":
        return "bilm-tf biLM", writer(trained, staging, encoder_only)
    model, tensors, config_json, write_tokenizer = writer(trained, encoder_only)
    config_json["dtype"] = dtype
    save_file(_cast(tensors, dtype), staging / "model.safetensors", metadata={"format": "pt"})
    (staging / "config.json").write_text(json.dumps(config_json, indent=2) + "\n",
                                         encoding="utf-8")
    return model, ["config.json", "model.safetensors", *write_tokenizer(staging)]


def export_bert(config: BertConfig, params: Params, out: str | os.PathLike,
                vocab_file: str | os.PathLike, lower_case: bool, dtype: str = "float32"
                ) -> list[str]:
    """Write plain BertModel (or BertForPreTraining, with its heads) `params` of `config` and
    a WordPiece vocabulary as a transformers model directory `out`; the files written. The
    Python API's export, for weights that never were a workdir (e.g. imported ones)."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    architecture = "BertForPreTraining" if "bert" in params else "BertModel"
    tensors = hf_bert.bertjax_to_hf(params, config)
    config_json = {**hf_bert.hf_config(config, architecture), "dtype": dtype}
    save_file(_cast(tensors, dtype), out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config_json, indent=2) + "\n", encoding="utf-8")
    return ["config.json", "model.safetensors",
            *hf_tokenizer.write_wordpiece(out, vocab_file, lower_case,
                                          config.max_position_embeddings)]
