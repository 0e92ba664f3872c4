"""An exported classifier's id2label is the dataset's class order: a model fine-tuned on TFDS's
glue/mrpc (not_equivalent = 0, equivalent = 1) says label 1 is equivalent in transformers, and
transformers' predictions under that config are the run's own dev predictions. Sorted names
would have made index 1 not_equivalent, inverting code that assumes the dataset's ids."""

import json

import jax
import numpy as np
import pytest

import bertjax.finetune
from bertjax.convert.export import export
from bertjax.finetune.pretrained import load_pretrained
from bertjax.finetune.readers import tfds as tfds_reader
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.tasks import get_task
from bertjax.training.mesh import make_mesh
from tests.minilm import random_bert

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tfds = pytest.importorskip("tensorflow_datasets")


def mrpc_rows(n, seed):
    """glue/mrpc-shaped TFDS rows: a sentence and a shortened copy (1) or another (0)."""
    rng = np.random.default_rng(seed)
    words = "the bank said on monday that its quarterly profit rose sharply".split()
    rows = []
    for i in range(n):
        a = " ".join(rng.permutation(words)[:8])
        label = i % 2
        b = " ".join(a.split()[:5]) if label else " ".join(rng.permutation(words)[:6])
        rows.append({"sentence1": a.encode(), "sentence2": b.encode(), "label": np.int64(label),
                     "idx": np.int32(i)})
    return rows


def test_exported_mrpc_label_1_is_equivalent_in_transformers(tmp_path):
    names = tfds_reader.class_names(tfds.builder("glue/mrpc").info.features)
    read = lambda rows: tfds_reader.examples_from_tfds(  # noqa: E731
        rows, get_task("pair_classification").reading, names, where="tfds:glue/mrpc")
    train, dev = read(mrpc_rows(16, 0)), read(mrpc_rows(8, 1))
    model = load_pretrained(str(random_bert(tmp_path / "bert")), "bert")
    recipe = Recipe("bert", "pair_classification", max_seq_length=32, batch_size=8,
                    epochs=1.0, length_buckets=1)
    bertjax.finetune.run(recipe, model, train, dev, tmp_path / "run",
                         mesh=make_mesh(devices=jax.devices()[:1]))
    out = export(tmp_path / "run", tmp_path / "export").out

    config = transformers.AutoConfig.from_pretrained(out)
    assert config.id2label == {0: "not_equivalent", 1: "equivalent"} == dict(
        enumerate(names["label"]))
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(
        out, dtype=torch.float32).eval()
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl")
            .read_text().splitlines()]
    batch = tokenizer([ex.texts[0] for ex in dev], [ex.texts[1] for ex in dev],
                      padding=True, return_tensors="pt")
    with torch.no_grad():
        ids = hf(**batch).logits.argmax(-1).tolist()
    assert [config.id2label[i] for i in ids] == [r["prediction"] for r in rows]
    assert {r["gold"] for r in rows} == {"equivalent", "not_equivalent"}
