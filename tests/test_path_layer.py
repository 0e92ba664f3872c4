"""Workdirs go through the one path layer (bertjax/files.py), read from the source: no
`pathlib.Path(...)` in the packages that handle workdirs (finetune/, training/, analysis/)
except the local-only uses listed below, each with its reason. `pathlib.Path` of a gs:// path
is a local path (`pathlib.Path(epath.Path("gs://b/run"))` is /gs/b/run): `bertjax-glue`
reached the bucket only through etils mapping /gs/ back, and `bertjax-finetune --predict`
made /gs/BUCKET/RUN/submission on the local disk (a PermissionError for a non-root user at
the end of a run) and printed that path. Pure paths (`pathlib.PurePosixPath`) only take
names apart and are allowed."""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("bertjax/finetune", "bertjax/training", "bertjax/analysis")
CONCRETE = ("Path", "PosixPath", "WindowsPath")  # pathlib's classes that read and write

# (file, function, the argument's source): why a local path is right there
LOCAL_ONLY = {
    ("bertjax/training/checkpoint.py", "Checkpointer.checkpoint_bytes",
     "self.directory / str(latest)"):
        "sizes a local checkpoint's files (a gs:// directory is sized from the state)",
    ("bertjax/training/workdir.py", "tokenizer_file", "path"):
        "a local workdir's tokenizer file; a gs:// one is downloaded (files.local_copy)",
    ("bertjax/finetune/pretrained.py", "load_pretrained", "p.strip()"):
        "bilm-tf's OPTIONS.json,WEIGHTS.hdf5 pair, read by h5py from the local disk",
    ("bertjax/finetune/pretrained.py", "load_pretrained", "init"):
        "a local --init (a gs:// one is a bertjax workdir and goes through files above); "
        "the transformers, Google and bilm-tf readers read local files",
    ("bertjax/finetune/task_record.py", "init_text", "init"):
        "init.txt records a local --init as an absolute path (gs:// ones as given)",
    ("bertjax/analysis/plotting.py", "heatmap_grid", "path"):
        "a figure a notebook names, written by matplotlib to the local disk",
}


def _pathlib_names(tree: ast.Module) -> set[str]:
    """The local names of pathlib's concrete classes imported with `from pathlib import`."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "pathlib"
            for alias in node.names if alias.name in CONCRETE}


def _is_concrete_path(func: ast.expr, imported: set[str]) -> bool:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id == "pathlib" and func.attr in CONCRETE
    return isinstance(func, ast.Name) and func.id in imported


def path_calls(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function, argument source, line) of each concrete pathlib path made."""
    tree = ast.parse(source)
    imported, found = _pathlib_names(tree), []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = [*scope, child.name]
            if isinstance(child, ast.Call) and _is_concrete_path(child.func, imported):
                argument = ", ".join(ast.unparse(a) for a in child.args)
                found.append((".".join(scope) or "<module>", argument, child.lineno))
            visit(child, inner)

    visit(tree, [])
    return found


def calls_in_packages() -> dict[tuple[str, str, str], list[int]]:
    calls: dict[tuple[str, str, str], list[int]] = {}
    for package in PACKAGES:
        for file in sorted((REPO / package).rglob("*.py")):
            relative = str(file.relative_to(REPO))
            for function, argument, line in path_calls(file.read_text(encoding="utf-8")):
                calls.setdefault((relative, function, argument), []).append(line)
    return calls


def test_no_pathlib_path_on_a_workdir():
    unlisted = [f"{file}:{lines[0]} in {function}: pathlib.Path({argument})"
                for (file, function, argument), lines in calls_in_packages().items()
                if (file, function, argument) not in LOCAL_ONLY]
    assert not unlisted, ("a workdir (local or gs://) goes through bertjax.files.as_path; a "
                          "path that is local by nature goes in LOCAL_ONLY with its reason: "
                          + "; ".join(unlisted))


def test_every_allowed_use_is_still_there():
    """An entry whose call was removed or routed through files goes too."""
    assert set(LOCAL_ONLY) <= set(calls_in_packages())


def absolute_calls(source: str) -> list[int]:
    """Lines calling a path's own `.absolute()`: of a gs:// epath it is the local
    CWD/gs:/BUCKET/... (files.absolute keeps object-store paths as they are)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "absolute" and not node.args
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "files"))


def test_no_path_absolute_on_a_workdir():
    """The best checkpoint of a gs:// run was looked for under CWD/gs:/... (what
    `bertjax-finetune --predict` reads its submissions' parameters from)."""
    found = [f"{file.relative_to(REPO)}:{line}" for package in PACKAGES
             for file in sorted((REPO / package).rglob("*.py"))
             for line in absolute_calls(file.read_text(encoding="utf-8"))]
    assert not found, "use bertjax.files.absolute(path), which keeps gs:// paths: " + ", ".join(
        found)


def test_the_check_sees_each_spelling():
    source = ("import pathlib\nfrom pathlib import Path as P, PurePosixPath\n"
              "def run(workdir):\n    root = pathlib.Path(workdir)\n    P(workdir).mkdir()\n"
              "    PurePosixPath(workdir).name\n    pathlib.PurePath(workdir)\n"
              "class Writer:\n    def save(self):\n        pathlib.PosixPath(self.workdir)\n")
    assert path_calls(source) == [("run", "workdir", 4), ("run", "workdir", 5),
                                  ("Writer.save", "self.workdir", 10)]
    assert absolute_calls("workdir.absolute() / 'x'\nfiles.absolute(workdir)\n") == [1]
