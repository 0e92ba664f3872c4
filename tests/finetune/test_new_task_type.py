"""docs/design.md's "Add a task type" as code: a task type defined in one module (here, this
test) is registered and trains end to end through `bertjax.finetune.run`, touching no loop,
family, CLI or GLUE code; and the walkthroughs' file lists name files that exist."""

import re

import pytest

import bertjax.finetune
from bertjax import metrics
from bertjax.data.corpora import stdlib_documents
from bertjax.finetune.examples import Reading, TextExample
from bertjax.finetune.outputs import SCORE
from bertjax.finetune.recipe import Recipe
from bertjax.finetune.task import TASKS, TEXTS, Task, register
from bertjax.training.mesh import make_mesh
from tests.conftest import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "workdirs" / "bert_pretraining"


class WordCount(Task):
    """How many words a sentence has, as a score: a task type of one module (which would
    carry `@register`; the fixture registers it only while its test runs). Its output, a
    score, fixes what it trains on, compares and decodes: the task type says none of it."""

    name = "toy_word_count"
    reading = Reading("table", name, text_counts=(1,), numeric_label=True)
    inputs, output = TEXTS, SCORE
    metrics = metrics.REGRESSION


@pytest.fixture
def registered():
    register(WordCount)
    yield
    del TASKS[WordCount.name]


def test_a_task_type_of_one_module_trains_through_finetune_run(registered, tmp_path):
    import jax

    assert isinstance(TASKS["toy_word_count"], WordCount)
    sentences = [" ".join(s.split()[:12]) for d in stdlib_documents("held_out") for s in d
                 if len(s.split()) > 2][:48]
    examples = [TextExample(str(i), (s,), str(len(s.split()) / 4)) for i, s in
                enumerate(sentences)]
    recipe = Recipe("bert", "toy_word_count", epochs=1.0, batch_size=8, max_seq_length=32,
                    learning_rate=1e-3, eval_every=100, optimizer="adamw")
    outcome = bertjax.finetune.run(recipe, str(FIXTURE), examples, examples[:16],
                                   tmp_path / "run", mesh=make_mesh(devices=jax.devices()[:1]))
    assert outcome.result.step == 6
    final = outcome.results["final"]
    assert set(final) >= {"pearson", "spearman"}
    assert outcome.setup.task is TASKS["toy_word_count"]


def test_the_walkthroughs_name_files_that_exist():
    """Every path docs/design.md's walkthroughs name (with <family>, <type> or <kind> as a
    wildcard) is a file or folder of the checkout."""
    design = (REPO_ROOT / "docs" / "design.md").read_text()
    walkthroughs = design[design.index("## Adding a model family"):]
    assert "## Adding a task type" in walkthroughs
    assert "## Adding a prediction kind" in walkthroughs
    paths = set(re.findall(r"`((?:bertjax|configs|tests|docs)/[\w/<>.*-]+)`", walkthroughs))
    assert len(paths) > 8, paths
    for path in sorted(paths):
        pattern = re.sub(r"<\w+>", "*", path)
        assert list(REPO_ROOT.glob(pattern)), path


def test_no_task_type_rewrites_what_its_output_fixes():
    """Each output kind (finetune/outputs.py) owns what a training example teaches, the golds
    and the decoding, so no registered task type defines them again."""
    assert {"classification", "regression", "tagging", "multiple_choice", "qa"} <= set(TASKS)
    for name, task in TASKS.items():
        for method in ("targets", "golds", "decode"):
            assert getattr(type(task), method) is getattr(Task, method), (name, method)
