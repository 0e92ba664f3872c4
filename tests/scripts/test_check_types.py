"""The type check of `make test` (scripts/check_types.py): a file with more mypy errors than
its recorded count fails it, naming the file; fewer pass and point at `--update`, which
refuses to record growth."""

import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_types", REPO / "scripts/check_types.py")
check_types = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_types)

LINES = ["bertjax/a.py:3: error: Incompatible types  [assignment]",
         "bertjax/a.py:7:5: error: Missing return  [return]",
         "bertjax/a.py:8: note: see here",
         "bertjax/b.py:1: error: Name 'x' is not defined  [name-defined]"]


def test_counts_errors_per_file_not_notes():
    errors = [line for line in LINES if check_types.ERROR.match(line)]
    assert check_types.count(errors) == {"bertjax/a.py": 2, "bertjax/b.py": 1}


def test_more_errors_than_recorded_is_over_and_fewer_is_under():
    over, under = check_types.compare({"bertjax/a.py": 2, "bertjax/c.py": 1},
                                      {"bertjax/a.py": 1, "bertjax/b.py": 4})
    assert over == {"bertjax/a.py": (2, 1), "bertjax/c.py": (1, 0)}
    assert under == {"bertjax/b.py": (0, 4)}


@pytest.fixture
def fake_mypy(monkeypatch, tmp_path):
    monkeypatch.setattr(check_types, "BASELINE", tmp_path / "type_baseline.json")
    monkeypatch.setattr(check_types, "ROOT", tmp_path)
    monkeypatch.setattr(check_types, "run_mypy", lambda: [LINES[0], LINES[1], LINES[3]])
    return check_types.BASELINE


def test_growth_fails_and_names_the_file(fake_mypy, capsys):
    fake_mypy.write_text('{"bertjax/a.py": 1, "bertjax/b.py": 1}')
    assert check_types.main([]) == 1
    out = capsys.readouterr().out
    assert "bertjax/a.py: 2 errors, 1 recorded" in out
    assert "[return]" in out  # the file's errors are shown


def test_fewer_pass_and_update_lowers_but_never_raises(fake_mypy, capsys):
    fake_mypy.write_text('{"bertjax/a.py": 3, "bertjax/b.py": 1}')
    assert check_types.main([]) == 0
    assert "--update" in capsys.readouterr().out
    assert check_types.main(["--update"]) == 0
    assert fake_mypy.read_text().split() == ["{", '"bertjax/a.py":', "2,", '"bertjax/b.py":',
                                             "1", "}"]
    fake_mypy.write_text('{"bertjax/a.py": 1}')
    assert check_types.main(["--update"]) == 1
    assert check_types.main(["--update", "--allow-growth"]) == 0
