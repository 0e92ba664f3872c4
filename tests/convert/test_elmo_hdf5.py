"""bilm-tf / AllenNLP ELMo weight files: a file the test writes in that layout with h5py is
imported, and our biLM's layers match a TensorFlow rendering of bilm-tf's inference graph run
on the raw arrays (tf.nn.conv2d with bilm-tf's kernel layout, TF's LSTMBlockCell with its
i, j, f, o gate order and forget bias 1.0, cell and projection clipping)."""

import json

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.convert.elmo_hdf5 import WeightFileError, load_bilm_hdf5, save_bilm_hdf5
from bertjax.inference.elmo import ElmoEmbedder
from bertjax.models.elmo import ElmoBiLM
from bertjax.tokenizers.elmo_vocab import sentence_char_ids

tf = pytest.importorskip("tensorflow")

OPTIONS = {
    "lstm": {"dim": 6, "projection_dim": 5, "n_layers": 2, "cell_clip": 1.0, "proj_clip": 0.5,
             "use_skip_connections": True},
    "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 8], [3, 8]], "n_highway": 2,
                 "embedding": {"dim": 4}, "n_characters": 262, "max_characters_per_token": 8},
}
E, C, H, P, F = 4, 8, 6, 5, 20
RNN = "RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell/{name}"


def write_bilm_files(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {"char_embed": rng.normal(size=(261, E))}
    for i, (width, num) in enumerate(OPTIONS["char_cnn"]["filters"]):
        arrays[f"CNN/W_cnn_{i}"] = rng.normal(size=(1, width, E, num)) * 0.5
        arrays[f"CNN/b_cnn_{i}"] = rng.normal(size=(num,)) * 0.1
    for i in range(2):
        for part in ("carry", "transform"):
            arrays[f"CNN_high_{i}/W_{part}"] = rng.normal(size=(F, F)) / np.sqrt(F)
            arrays[f"CNN_high_{i}/b_{part}"] = rng.normal(size=(F,)) * 0.1
    arrays["CNN_proj/W_proj"] = rng.normal(size=(F, P)) / np.sqrt(F)
    arrays["CNN_proj/b_proj"] = rng.normal(size=(P,)) * 0.1
    for d in range(2):
        for k in range(2):
            arrays[RNN.format(d=d, k=k, name="W_0")] = rng.normal(size=(P + P, 4 * H))
            arrays[RNN.format(d=d, k=k, name="B")] = rng.normal(size=(4 * H,)) * 0.3
            arrays[RNN.format(d=d, k=k, name="W_P_0")] = rng.normal(size=(H, P))
    weights, options = tmp_path / "weights.hdf5", tmp_path / "options.json"
    with h5py.File(weights, "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value.astype(np.float32))
    options.write_text(json.dumps(OPTIONS))
    return options, weights, {k: v.astype(np.float32) for k, v in arrays.items()}


def tf_bilm_reference(a, char_ids, lengths):
    """bilm-tf's BidirectionalLanguageModelGraph, written with TF2 ops on the raw arrays."""
    table = np.concatenate([np.zeros((1, E), np.float32), a["char_embed"]])  # + padding row 0
    x = tf.nn.embedding_lookup(table, char_ids)  # [B, T, C, E]
    convs = []
    for i in range(len(OPTIONS["char_cnn"]["filters"])):
        conv = tf.nn.conv2d(x, a[f"CNN/W_cnn_{i}"], strides=[1, 1, 1, 1], padding="VALID")
        convs.append(tf.nn.relu(tf.reduce_max(conv + a[f"CNN/b_cnn_{i}"], axis=2)))
    B, T = char_ids.shape[:2]
    h = tf.reshape(tf.concat(convs, 2), [-1, F])
    for i in range(2):
        carry = tf.sigmoid(h @ a[f"CNN_high_{i}/W_carry"] + a[f"CNN_high_{i}/b_carry"])
        transform = tf.nn.relu(h @ a[f"CNN_high_{i}/W_transform"] + a[f"CNN_high_{i}/b_transform"])
        h = carry * transform + (1.0 - carry) * h
    token = tf.reshape(h @ a["CNN_proj/W_proj"] + a["CNN_proj/b_proj"], [B, T, P])
    outputs = {}
    for d, direction in enumerate(("forward", "backward")):
        inp = token if d == 0 else tf.reverse_sequence(token, lengths, seq_axis=1, batch_axis=0)
        layers = []
        for k in range(2):
            w = np.concatenate([a[RNN.format(d=d, k=k, name="W_0")], np.zeros((H, 4 * H), "f")])
            cs, hp, steps = tf.zeros([B, H]), tf.zeros([B, P]), []
            for t in range(T):
                cell = tf.raw_ops.LSTMBlockCell(
                    x=tf.concat([inp[:, t], hp], 1), cs_prev=cs, h_prev=tf.zeros([B, H]), w=w,
                    wci=tf.zeros([H]), wcf=tf.zeros([H]), wco=tf.zeros([H]),
                    b=a[RNN.format(d=d, k=k, name="B")], forget_bias=1.0,
                    cell_clip=OPTIONS["lstm"]["cell_clip"], use_peephole=False)
                cs = cell.cs
                hp = tf.clip_by_value(cell.h @ a[RNN.format(d=d, k=k, name="W_P_0")], -0.5, 0.5)
                steps.append(hp)
            out = tf.stack(steps, 1) + (inp if k > 0 else 0.0)  # ResidualWrapper above layer 0
            layers.append(out if d == 0 else tf.reverse_sequence(out, lengths, 1, 0))
            inp = out
        outputs[direction] = [np.asarray(y) for y in layers]
    return np.asarray(token), outputs


def padded_char_ids():
    words = [["The", "bank", "of", "rivers"], ["Money", "é"], ["a", "bb", "ccc", "dddd", "eeeee"]]
    T = max(len(w) for w in words) + 2
    ids = np.zeros((len(words), T, C), np.int32)
    for b, sentence in enumerate(words):
        ids[b, :len(sentence) + 2] = sentence_char_ids(sentence, C)
    return ids, np.array([len(w) + 2 for w in words], np.int32)


def test_imported_bilm_matches_tensorflow_bilm_tf_graph(tmp_path):
    options, weights, arrays = write_bilm_files(tmp_path)
    config, params = load_bilm_hdf5(options, weights)
    shape = (config.cell_size, config.proj_size, config.num_highway, config.max_chars)
    assert shape == (H, P, 2, C)
    char_ids, lengths = padded_char_ids()
    out = ElmoBiLM(config).apply({"params": params}, None, jnp.asarray(char_ids),
                                 jnp.asarray(lengths))
    want_token, want = tf_bilm_reference(arrays, char_ids, lengths)
    worst = 0.0
    for b, n in enumerate(lengths):
        pairs = [(out["token"], want_token)] + [
            (out[d][k], want[d][k]) for d in ("forward", "backward") for k in range(2)]
        for got, ref in pairs:
            np.testing.assert_allclose(np.asarray(got)[b, :n], ref[b, :n], atol=1e-5, rtol=0)
            worst = max(worst, float(np.abs(np.asarray(got)[b, :n] - ref[b, :n]).max()))
    print(f"max |bertjax - TF bilm-tf graph| = {worst:.2e}")


def test_export_import_round_trip_and_embedder(tmp_path):
    options, weights, _ = write_bilm_files(tmp_path, seed=1)
    config, params = load_bilm_hdf5(options, weights)
    out_dir = tmp_path / "again"
    out_dir.mkdir()
    save_bilm_hdf5(config, params, out_dir / "options.json", out_dir / "weights.hdf5")
    config2, params2 = load_bilm_hdf5(out_dir / "options.json", out_dir / "weights.hdf5")
    assert config2 == config
    jax.tree.map(np.testing.assert_array_equal, params2, params)
    embedder = ElmoEmbedder.from_hdf5(options, weights, batch_size=2)
    [layers] = embedder.embed(["The bank of rivers"])
    assert layers.shape == (3, 4, 2 * P)
    np.testing.assert_array_equal(layers[0, :, :P], layers[0, :, P:])  # h_0 = [x; x]


def test_bad_weight_files_are_one_line(tmp_path):
    options, weights, _ = write_bilm_files(tmp_path)
    with h5py.File(weights, "a") as f:
        del f["CNN_high_1/W_carry"]
    with pytest.raises(WeightFileError, match="no dataset 'CNN_high_1/W_carry'") as err:
        load_bilm_hdf5(options, weights)
    assert "\n" not in str(err.value)
    text = tmp_path / "text.hdf5"
    text.write_text("not hdf5")
    with pytest.raises(WeightFileError, match="not a readable HDF5 file"):
        load_bilm_hdf5(options, text)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"lstm": {}}))
    with pytest.raises(WeightFileError, match="options lack"):
        load_bilm_hdf5(bad, weights)
