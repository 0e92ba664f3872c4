"""bertjax-export on real runs: a tiny BERT and GPT-2 pretrained for a few steps on WikiText-2,
a classifier fine-tuned from the BERT, a BERT trained with scanned bfloat16 layers and an
ELMo, exported and read back by transformers (logits within 1e-4 on held-out text, the
tokenizer's ids equal to bertjax's on every line of WikiText-2) or by bertjax's bilm-tf
reader; bad input is one line and exit status 2, with --out untouched."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.convert.elmo_hdf5 import load_bilm_hdf5
from bertjax.finetune.outputs import CLASSES
from bertjax.training.checkpoint import restore_saved_params
from tests.gcs import gcs_bucket  # noqa: F401 - the fixture
from tests.in_process import run_tool

REPO = pathlib.Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
TOL = 1e-4
HELD_OUT = ["The committee approved the budget for the new railway station in March .",
            "She scored twice in the final , and the crowd sang her name .",
            "Rivers flood the valley each spring ."]


def train(workdir, experiment, *extra):
    result = run_tool("bertjax.cli.train", f"--gin_file=configs/experiments/{experiment}.gin",
                      f"--workdir={workdir}", "--noprogress", *extra, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def export(*args):
    return run_tool("bertjax.cli.export", *args, cwd=REPO)


def exported(workdir, out, *extra):
    result = export(f"--checkpoint={workdir}", f"--out={out}", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(out)
    return out


def load(directory, auto_class):
    """transformers' model of `directory` by its Auto class; nothing missing or unexpected."""
    model, info = getattr(transformers, auto_class).from_pretrained(
        directory, dtype=torch.float32, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                         "error_msgs")), info
    return model.eval()


def corpus_lines(path):
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------------------- runs

BERT = ["--gin.NUM_STEPS=2", "--gin.BATCH_SIZE=8", "--gin.VOCAB_SIZE=2000",
        "--gin.bert_config.hidden_size=64", "--gin.bert_config.num_heads=4",
        "--gin.bert_config.mlp_dim=128", "--gin.train.seq_phases=((1.0, 64),)",
        "--gin.train.checkpoint_every=2", "--gin.bert_pretraining_source.corpus_format='plain'"]


@pytest.fixture(scope="module")
def bert_run(wikitext_valid, tmp_path_factory):
    return train(tmp_path_factory.mktemp("bert") / "run", "bert_tiny_cpu", *BERT,
                 f"--gin.bert_pretraining_source.corpus='{wikitext_valid}'")


@pytest.fixture(scope="module")
def gpt_run(wikitext_valid, tmp_path_factory):
    return train(tmp_path_factory.mktemp("gpt") / "run", "gpt_tiny_cpu", "--gin.NUM_STEPS=2",
                 "--gin.BATCH_SIZE=8", "--gin.SEQ_LENGTH=32", "--gin.VOCAB_SIZE=1024",
                 "--gin.gpt_config.hidden_size=64", "--gin.gpt_config.num_heads=4",
                 "--gin.gpt_config.mlp_dim=128", "--gin.train.checkpoint_every=2",
                 f"--gin.lm_pretraining_source.corpus='{wikitext_valid}'",
                 "--gin.lm_pretraining_source.corpus_format='plain'")


def bert_inputs(vocab_file, texts, lower_case=True):
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary

    vocab = WordPieceVocabulary(vocab_file, lower_case=lower_case)
    rows = [[vocab.cls_id, *vocab.encode(t)[:30], vocab.sep_id] for t in texts]
    ids = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    return ids, np.zeros_like(ids), (ids > 0).astype(np.int32)


def torch_inputs(ids, segments, mask):
    return {"input_ids": torch.from_numpy(ids).long(),
            "token_type_ids": torch.from_numpy(segments).long(),
            "attention_mask": torch.from_numpy(mask).long()}


# ----------------------------------------------------------------------------- BERT


def test_bert_pretraining_exports_as_bert_for_pretraining(bert_run, tmp_path):
    from bertjax.models.bert import BertForPreTraining
    from bertjax.training.workdir import model_config, read_record

    out = exported(bert_run, tmp_path / "hf")
    model = load(out, "AutoModelForPreTraining")
    assert type(model).__name__ == "BertForPreTraining"
    ids, segments, mask = bert_inputs(bert_run / "vocab.txt", HELD_OUT)
    with torch.no_grad():
        theirs = model(**torch_inputs(ids, segments, mask))
    config = model_config(read_record(bert_run))
    params, _, _ = restore_saved_params(bert_run)
    positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    ours = BertForPreTraining(config).apply({"params": params}, ids, segments, mask, positions)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(ours["mlm_logits"])[real],
                               theirs.prediction_logits.numpy()[real], atol=TOL, rtol=0)
    np.testing.assert_allclose(ours["nsp_logits"], theirs.seq_relationship_logits.numpy(),
                               atol=TOL, rtol=0)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"


def test_exported_wordpiece_gives_bertjax_ids_on_every_wikitext_line(bert_run, wikitext_valid,
                                                                     tmp_path):
    from bertjax.tokenizers.wordpiece import WordPieceVocabulary

    out = exported(bert_run, tmp_path / "hf")
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    ours = WordPieceVocabulary(bert_run / "vocab.txt", lower_case=True)
    lines = corpus_lines(wikitext_valid)
    assert len(lines) > 2000
    expected = [ours.encode(line) for line in lines]
    got = theirs(lines, add_special_tokens=False)["input_ids"]
    differ = [i for i, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b]
    assert not differ, f"{len(differ)} lines differ, first: {lines[differ[0]]!r}"
    assert theirs.convert_tokens_to_ids(["[CLS]", "[SEP]", "[MASK]"]) == [
        ours.cls_id, ours.sep_id, ours.mask_id]


@pytest.fixture(scope="module")
def scanned_bf16_run(bert_run, wikitext_valid, tmp_path_factory):
    return train(tmp_path_factory.mktemp("scanned") / "run", "bert_tiny_cpu", *BERT,
                 f"--gin.bert_pretraining_source.corpus='{wikitext_valid}'",
                 f"--gin.bert_pretraining_source.vocab='{bert_run}'",
                 "--gin.bert_config.scan_layers=True", "--gin.bert_config.param_dtype='bfloat16'")


@pytest.mark.e2e  # a third training run; tests/convert/test_export.py checks both mechanisms
def test_scanned_bfloat16_run_exports_per_layer_float32(scanned_bf16_run, tmp_path):
    """The scanned model's own outputs (bfloat16 weights widened, float32 compute) are what
    transformers computes from the un-stacked float32 export."""
    from safetensors.numpy import load_file

    from bertjax.models.bert import BertForPreTraining
    from bertjax.training.workdir import model_config, read_record

    params, _, _ = restore_saved_params(scanned_bf16_run)
    kernel = params["bert"]["encoder"]["layers"]["block"]["mlp"]["wi"]["kernel"]
    assert kernel.dtype == jnp.bfloat16 and kernel.shape[0] == 2  # stacked layers
    out = exported(scanned_bf16_run, tmp_path / "hf")
    tensors = load_file(out / "model.safetensors")
    assert {t.dtype for t in tensors.values()} == {np.dtype(np.float32)}
    np.testing.assert_array_equal(tensors["bert.encoder.layer.1.intermediate.dense.weight"],
                                  np.asarray(kernel[1], np.float32).T)
    model = load(out, "AutoModelForPreTraining")
    ids, segments, mask = bert_inputs(scanned_bf16_run / "vocab.txt", HELD_OUT)
    with torch.no_grad():
        theirs = model(**torch_inputs(ids, segments, mask))
    config = model_config(read_record(scanned_bf16_run), param_dtype="float32")
    assert config.transformer.scan_layers
    wide = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    ours = BertForPreTraining(config).apply({"params": wide}, ids, segments, mask, positions)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(ours["mlm_logits"])[real],
                               theirs.prediction_logits.numpy()[real], atol=TOL, rtol=0)
    half = exported(scanned_bf16_run, tmp_path / "bf16", "--dtype=bfloat16")
    assert str(load_file(half / "model.safetensors")["bert.pooler.dense.bias"].dtype) == "bfloat16"


@pytest.fixture(scope="module")
def classifier_run(bert_run, agnews_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("classifier")
    lines = (agnews_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
    rows = [r for r in lines[1:] if r.endswith(("\tSports", "\tBusiness", "\tWorld"))]
    (root / "train.tsv").write_text("\n".join([lines[0], *rows[:48]]) + "\n")
    (root / "dev.tsv").write_text("\n".join([lines[0], *rows[48:72]]) + "\n")
    result = run_tool("bertjax.cli.finetune", "--gin_file=configs/finetune/bert_classification.gin",
                      f"--init={bert_run}", f"--train={root / 'train.tsv'}",
                      f"--eval={root / 'dev.tsv'}", f"--workdir={root / 'run'}", "--noprogress",
                      "--gin.finetune.max_seq_length=32", "--gin.finetune.batch_size=16",
                      "--gin.finetune.epochs=1.0", "--gin.finetune.length_buckets=1", cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run"


def test_fine_tuned_classifier_exports_with_its_labels(classifier_run, tmp_path):
    from bertjax.finetune.heads.bert import BertHead
    from bertjax.training.workdir import model_config, read_record

    out = exported(classifier_run, tmp_path / "hf")
    config_json = json.loads((out / "config.json").read_text())
    assert config_json["id2label"] == {"0": "Business", "1": "Sports", "2": "World"}
    assert config_json["problem_type"] == "single_label_classification"
    model = load(out, "AutoModelForSequenceClassification")
    assert type(model).__name__ == "BertForSequenceClassification"
    ids, segments, mask = bert_inputs(out / "vocab.txt", HELD_OUT)
    with torch.no_grad():
        theirs = model(**torch_inputs(ids, segments, mask)).logits.numpy()
    params, _, which = restore_saved_params(classifier_run)  # the best checkpoint
    assert which == "best"
    config = model_config(read_record(classifier_run))
    ours = BertHead(config, CLASSES, 3).apply({"params": params}, ids, segments, mask)
    np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=0)
    encoder = exported(classifier_run, tmp_path / "encoder", "--encoder_only")
    assert type(load(encoder, "AutoModel")).__name__ == "BertModel"


# ----------------------------------------------------------------------------- GPT-2


def test_gpt2_exports_as_gpt2_lm_head_model(gpt_run, wikitext_valid, tmp_path):
    from bertjax.models.gpt import GptLM
    from bertjax.tokenizers.bpe import ByteLevelBPE
    from bertjax.training.workdir import model_config, read_record

    out = exported(gpt_run, tmp_path / "hf")
    model = load(out, "AutoModelForCausalLM")
    assert type(model).__name__ == "GPT2LMHeadModel"
    ours_bpe = ByteLevelBPE.from_files(gpt_run / "vocab.json", gpt_run / "merges.txt")
    theirs_bpe = transformers.AutoTokenizer.from_pretrained(out)
    lines = corpus_lines(wikitext_valid)
    got = theirs_bpe(lines, add_special_tokens=False)["input_ids"]
    differ = [i for i, line in enumerate(lines) if ours_bpe.encode(line) != got[i]]
    assert not differ, f"{len(differ)} lines differ, first: {lines[differ[0]]!r}"

    rows = [ours_bpe.encode(text)[:20] for text in HELD_OUT]
    ids = np.array([row + [0] * (20 - len(row)) for row in rows], np.int32)
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(ids).long()).logits.numpy()
    params, _, _ = restore_saved_params(gpt_run)
    ours = GptLM(model_config(read_record(gpt_run))).apply({"params": params}, ids)
    np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=0)


# ----------------------------------------------------------------------------- ELMo


@pytest.mark.e2e  # an ELMo training run; tests/convert/test_export.py writes and reads the layout
def test_elmo_exports_in_bilm_tf_layout(wikitext_valid, tmp_path):
    run = train(tmp_path / "elmo", "elmo_tiny_cpu", "--gin.NUM_STEPS=2", "--gin.BATCH_SIZE=8",
                "--gin.SEQ_LENGTH=16", "--gin.VOCAB_SIZE=512", "--gin.train.checkpoint_every=2",
                f"--gin.elmo_source.corpus='{wikitext_valid}'",
                "--gin.elmo_source.corpus_format='plain'")
    hf = export(f"--checkpoint={run}", f"--out={tmp_path / 'hf'}")
    assert hf.returncode == 2 and "ELMo has no transformers counterpart" in hf.stderr
    out = exported(run, tmp_path / "bilm", "--format=bilm")
    config, params = load_bilm_hdf5(out / "options.json", out / "weights.hdf5")
    saved, _, _ = restore_saved_params(run)
    saved = jax.device_get(saved)
    char_embed = saved["token_encoder"]["char_embed"]["embedding"]
    np.testing.assert_array_equal(params["token_encoder"]["char_embed"]["embedding"][1:],
                                  char_embed[1:])  # row 0 is bilm-tf's padding: zero there
    saved["token_encoder"]["char_embed"]["embedding"] = params["token_encoder"]["char_embed"][
        "embedding"]
    jax.tree.map(np.testing.assert_allclose, params, saved)
    assert (out / "vocab.txt").is_file()


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_one_line_and_leaves_out_alone(bert_run, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    empty_workdir = tmp_path / "started"
    empty_workdir.mkdir()
    (empty_workdir / "model.json").write_text((bert_run / "model.json").read_text())
    cases = {
        "is not empty": [f"--checkpoint={bert_run}", f"--out={full}"],
        "holds no checkpoint": [f"--checkpoint={empty_workdir}", f"--out={tmp_path / 'a'}"],
        "unknown --format='onnx'": [f"--checkpoint={bert_run}", f"--out={tmp_path / 'b'}",
                                    "--format=onnx"],
        "--format=bilm is ELMo's": [f"--checkpoint={bert_run}", f"--out={tmp_path / 'c'}",
                                    "--format=bilm"],
        "has no model.json": [f"--checkpoint={tmp_path}", f"--out={tmp_path / 'd'}"],
        "--out is required": [f"--checkpoint={bert_run}"],
    }
    for expected, args in cases.items():
        result = export(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (expected, result.stderr)
        assert lines[0].startswith("bertjax-export: error:") and expected in lines[0], lines
    assert [p.name for p in full.iterdir()] == ["keep.txt"]
    assert not any((tmp_path / name).exists() for name in "abcd")
    replaced = exported(bert_run, full, "--overwrite")  # export's own files, and no others
    assert (replaced / "keep.txt").read_text() == "mine" and (replaced / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def tree_digest(root):
    """Every file under `root` with its bytes: what must not change."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("placement", ["the run", "its parent", "its checkpoints",
                                       "inside the checkpoint read"])
def test_out_in_or_around_a_run_is_refused_and_the_run_is_untouched(bert_run, placement):
    """--out=RUN --overwrite used to replace the run's files with the export, --out=PARENT
    deleted every run beside it, --out=RUN/checkpoints deleted the checkpoints."""
    checkpoint, out = bert_run, {"the run": bert_run, "its parent": bert_run.parent,
                                 "its checkpoints": bert_run / "checkpoints"}.get(placement)
    if placement == "inside the checkpoint read":
        checkpoint = bert_run / "checkpoints" / "2"
        out = checkpoint / "hf"
    before = tree_digest(bert_run.parent)
    result = export(f"--checkpoint={checkpoint}", f"--out={out}", "--overwrite")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"bertjax-export: error: --out={out} "), lines
    assert tree_digest(bert_run.parent) == before


def test_the_second_of_two_exports_to_one_new_out_is_refused(bert_run, gpt_run, tmp_path,
                                                             monkeypatch):
    """Two exports to one new --out at the same moment both passed the check of --out, and
    the later one replaced the first one's files (a stray file of the other model left).
    Interleaved here as they raced: the GPT export completes while the BERT export is about
    to place its files; the BERT export then finds --out filled and is refused."""
    from bertjax.convert import destination
    from bertjax.convert import export as export_lib

    out = tmp_path / "hf"
    place = destination.place
    raced = []

    def racing_place(*args, **kwargs):
        if not raced:  # the BERT export's call: the GPT export runs through, placing its own
            raced.append(None)
            raced[0] = export_lib.export(gpt_run, out)
        return place(*args, **kwargs)

    monkeypatch.setattr(destination, "place", racing_place)
    result = export(f"--checkpoint={bert_run}", f"--out={out}")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"bertjax-export: error: --out={out} is not empty"), lines
    assert sorted(p.name for p in out.iterdir()) == sorted(raced[0].files)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no staging folder left


def test_a_staging_folder_left_by_a_killed_export_is_removed_by_the_next(bert_run, tmp_path):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()  # a process id that no longer runs, as a kill -9 leaves it
    left = tmp_path / f".hf.{dead.pid}.k3x9q.export-tmp"
    left.mkdir(mode=0o700)
    alive = tmp_path / ".hf.1.k3x9q.export-tmp"  # PID 1 runs: another export's, kept
    alive.mkdir(mode=0o700)
    exported(bert_run, tmp_path / "hf")
    assert not left.exists() and alive.exists()


def test_export_to_gs_goes_to_the_bucket_not_the_current_directory(
        bert_run, gcs_bucket, tmp_path):  # noqa: F811 - the fixture
    from bertjax import files

    out = f"{gcs_bucket}/exports/bert"
    result = run_tool("bertjax.cli.export", f"--checkpoint={bert_run}", f"--out={out}",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no ./gs:/bertjax-test/...
    written = files.as_path(out)
    assert {p.name for p in written.iterdir()} == {
        "config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
        "special_tokens_map.json"}
    assert json.loads((written / "config.json").read_text())["architectures"] == [
        "BertForPreTraining"]
    local = exported(bert_run, tmp_path / "local")
    assert (written / "model.safetensors").read_bytes() == (
        local / "model.safetensors").read_bytes()


def test_overwrite_onto_a_gs_folder_looks_for_runs_in_the_bucket(
        bert_run, gcs_bucket, tmp_path):  # noqa: F811 - the fixture
    """--overwrite onto a non-empty gs:// folder searched it for a run with a recursive glob,
    which etils refuses on object storage (a raw NotImplementedError): the search walks it."""
    from bertjax import files

    full = f"{gcs_bucket}/exports/full"
    files.write_text(f"{full}/keep.txt", "mine")
    result = run_tool("bertjax.cli.export", f"--checkpoint={bert_run}", f"--out={full}",
                      "--overwrite", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert files.as_path(f"{full}/keep.txt").read_text() == "mine"
    assert files.as_path(f"{full}/config.json").is_file()
    holder = f"{gcs_bucket}/exports/holder"
    files.write_text(f"{holder}/notes.txt", "mine")
    files.write_text(f"{holder}/old/run/model.json", "{}")
    result = run_tool("bertjax.cli.export", f"--checkpoint={bert_run}", f"--out={holder}",
                      "--overwrite", cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert f"holds the bertjax run {holder}/old/run:" in lines[0]
    assert sorted(p.name for p in files.as_path(holder).iterdir()) == ["notes.txt", "old"]
    assert list(tmp_path.iterdir()) == []


def test_a_run_on_gs_exports_from_its_newest_or_named_checkpoint(
        bert_run, gcs_bucket, tmp_path):  # noqa: F811 - the fixture
    """A run stored on gs:// was said to hold no checkpoint (its path was made local), and
    WORKDIR/checkpoints/STEP became ./gs:/...: both read the bucket now."""
    from bertjax import files

    run = f"{gcs_bucket}/runs/bert"
    for path in bert_run.rglob("*"):
        if path.is_file():
            files.copy(path, f"{run}/{path.relative_to(bert_run)}")
    local = exported(bert_run, tmp_path / "local")
    for checkpoint in (run, f"{run}/checkpoints/2"):
        out = tmp_path / checkpoint.rsplit("/", 1)[-1]
        result = run_tool("bertjax.cli.export", f"--checkpoint={checkpoint}", f"--out={out}",
                          cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"from {run} (step 2)" in result.stderr
        assert (out / "model.safetensors").read_bytes() == (
            local / "model.safetensors").read_bytes()
        assert (out / "vocab.txt").read_bytes() == (bert_run / "vocab.txt").read_bytes()
    assert not (tmp_path / "gs:").exists()
    unfinished = tmp_path / "unfinished"  # a step directory without its state
    (unfinished / "checkpoints" / "3").mkdir(parents=True)
    (unfinished / "model.json").write_text((bert_run / "model.json").read_text())
    result = export(f"--checkpoint={unfinished}/checkpoints/3", f"--out={tmp_path / 'x'}")
    assert result.returncode == 2 and result.stderr.strip().endswith(
        f"{unfinished}/checkpoints holds none; train for at least train.checkpoint_every "
        "steps"), result.stderr


def test_an_unreachable_gs_out_is_one_line_naming_it_and_the_fix(bert_run, monkeypatch):
    """It was gcsfs's bare "Cannot connect to host storage.googleapis.com:443 ...", naming
    neither --out nor a fix; training's line for an unreachable gs:// workdir says both."""
    import types

    import aiohttp
    import gcsfs

    from tests.gcs import free_port

    async def no_connection(self, *args, **kwargs):  # gcsfs's error once its retries are spent
        host = types.SimpleNamespace(host="storage.googleapis.com", port=443, ssl="default")
        raise aiohttp.ClientConnectorError(host, OSError(-2, "Name or service not known"))

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there either
    for name, value in {"STORAGE_EMULATOR_HOST": closed, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",
                        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
                        "NO_GCE_CHECK": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(gcsfs.GCSFileSystem, "_request", no_connection)
    result = export(f"--checkpoint={bert_run}", "--out=gs://unreachable-bucket/export")
    assert result.returncode == 2, result.stderr[-3000:]
    assert [x for x in result.stderr.splitlines() if x.strip()] == [
        "bertjax-export: error: gs://unreachable-bucket/export cannot be reached (Cannot "
        "connect to host storage.googleapis.com:443 ssl:default [Name or service not known]): "
        "check the network, the bucket name and the credentials"]


@pytest.fixture
def tiny_disk(tmpfs):
    """A 256 KiB tmpfs: an export of the test BERT does not fit (needs root)."""
    return tmpfs("256k")


def test_a_full_disk_is_one_line_and_leaves_nothing(bert_run, tiny_disk):
    out = tiny_disk / "hf"
    result = export(f"--checkpoint={bert_run}", f"--out={out}")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"bertjax-export: error: no space left on the device to write "
                               f"--out={out} "), lines
    assert "MiB" in lines[0]
    assert list(tiny_disk.iterdir()) == []  # no --out, no staging folder
