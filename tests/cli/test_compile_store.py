"""bertjax-compile plans a run reading a token store on gs:// (the emulator): the paper's
BERT-base on a v3-32 with corpus store:gs://..., the store's manifest checked against the
model and named in the report, and a store another run cannot read refused in one line."""

import importlib.util
import pathlib

import gin
import pytest

from bertjax.cli import compile as compile_cli
from bertjax.cli import gin_utils
from bertjax.data.bert.source import BertPretrainingSource
from bertjax.data.store import build as build_lib
from bertjax.data.store.format import StoreError
from tests.gcs import gcs_bucket  # noqa: F401 - the fixture

REPO = pathlib.Path(__file__).resolve().parents[2]
BASE = "configs/experiments/bert_base_tpu_v3_32.gin"
SMALL_ON_V3_8 = ["bert_config.size = 'tiny'", "bert_config.vocab_size = 1024", "BATCH_SIZE = 32",
                 "aot_compile.topology = 'v3:2x2'", "make_mesh.data = 8"]
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu is not installed: pip install -e '.[tpu]'")


@pytest.fixture(scope="module")
def gs_store(bert_sample, gcs_bucket, tmp_path_factory):  # noqa: F811 - the fixture
    """A BERT store of BERT's sample text on gs://, as bertjax-prepare --out=gs://... makes."""
    vocab = tmp_path_factory.mktemp("vocab")
    source = BertPretrainingSource(corpus=str(bert_sample), vocab_size=300)
    source.prepare(vocab)
    source.save(vocab)
    out = f"{gcs_bucket}/stores/bert-sample"
    manifest = build_lib.build("bert", str(bert_sample), str(vocab), out, shard_chars=1000)
    return out, manifest


def planned(bindings):
    """The experiment of the BERT-base v3-32 gin file with `bindings`, and its data line."""
    gin.clear_config()
    try:
        gin_utils.parse([str(REPO / BASE)], bindings)
        exp = gin_utils.configured("train")
        return exp, compile_cli.data_line(exp)
    finally:
        gin.clear_config()


def test_bert_base_on_a_v3_32_plans_a_gs_store(gs_store):
    out, manifest = gs_store
    exp, line = planned([f"bert_pretraining_source.corpus = 'store:{out}'"])
    assert exp.batch_size == 256 and exp.objective.config.vocab_size == 30522
    counts = manifest.counts()
    assert line.startswith(f"data: token store {out} (bert, lower_case=True): "
                           f"{counts['documents']:,} documents, {counts['tokens']:,} tokens in "
                           f"{len(manifest.shards)} shard(s), vocabulary of "
                           f"{manifest.vocab_size:,} from its manifest"), line
    assert planned([])[1] == ""  # a TFDS corpus is read only when the run starts


def test_a_store_the_model_cannot_read_is_refused_in_one_line(gs_store):
    out, manifest = gs_store
    with pytest.raises(StoreError, match="more than the model's vocab_size 100") as err:
        planned([f"bert_pretraining_source.corpus = 'store:{out}'",
                 "bert_config.vocab_size = 100"])
    assert "\n" not in str(err.value)
    with pytest.raises(StoreError, match="not a token store"):
        planned([f"bert_pretraining_source.corpus = 'store:{out}-missing'"])


@needs_libtpu
def test_the_compile_report_names_the_store(gs_store):
    """The experiment's config and code path on a v3-8 with BERT-tiny (the BERT-base v3-32
    compile itself is the end-to-end tier's, tests/training/test_aot.py)."""
    out, _ = gs_store
    result = compile_cli.compile_experiment(
        [str(REPO / BASE)], [*SMALL_ON_V3_8, f"bert_pretraining_source.corpus = 'store:{out}'"])
    report = compile_cli.format_report(result)
    assert f"data: token store {out} (bert" in report.splitlines()[2], report
    assert result.fits
