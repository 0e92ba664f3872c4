"""bertjax's modules import one another in layers, without a circle.

The graph is read from the source with `ast`: every `import` and `from ... import` of a
bertjax module counts, at the top of a file, inside a function or under TYPE_CHECKING alike,
and a package that imports all its modules by discovery (`pkgutil.iter_modules(__path__)`,
the task and family registries) counts as importing each of them.
"""

import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
ROOT = REPO_ROOT / "bertjax"

# Lower layers first; a module may import its own layer and those below. The longest prefix
# names a module's layer. finetune loads checkpoints through the converters below it;
# bertjax-export (convert.export) reads fine-tuning runs' task records through
# training.workdir, so it needs nothing above convert.
LAYERS = (
    ("bertjax", "bertjax.files"),
    ("bertjax.layers", "bertjax.metrics", "bertjax.tokenizers"),
    ("bertjax.models",),
    ("bertjax.objectives",),
    ("bertjax.training",),
    ("bertjax.data",),
    ("bertjax.convert", "bertjax.generation"),
    ("bertjax.inference",),
    ("bertjax.finetune",),
    ("bertjax.analysis",),
    ("bertjax.configurables",),
    ("bertjax.cli",),
)


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The bertjax modules `name` imports (see the module docstring)."""
    source = path.read_text(encoding="utf-8")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1],
                                 *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    if "iter_modules(__path__)" in source:
        found.update(m for m in known if m.rpartition(".")[0] == name)
    return {m for m in found if m in known and m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def layer(name: str) -> int:
    best, level = "", None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, level = prefix, i
    assert level is not None, f"{name} is in no layer: add its package to LAYERS"
    return level


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.unit
def test_the_graph_sees_imports_inside_functions_and_by_discovery(graph):
    assert "bertjax.finetune.runner" in graph["bertjax.finetune"]  # inside __getattr__
    assert "bertjax.finetune.tasks.classification" in graph["bertjax.finetune.tasks"]
    assert "bertjax.finetune.families.gpt" in graph["bertjax.finetune.families"]
    assert "bertjax.tokenizers.wordpiece" in graph["bertjax.finetune.families.bert"]


@pytest.mark.unit
def test_no_import_circles(graph):
    assert cycles(graph) == []


@pytest.mark.unit
def test_no_module_imports_a_higher_layer(graph):
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                    if layer(b) > layer(a))
    assert upward == []


def third_party_imports(path: pathlib.Path) -> set[str]:
    """The top-level packages other than bertjax that `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
    return found - {"bertjax"}


@pytest.mark.unit
def test_seqio_is_imported_from_the_data_layer_up():
    """The seqio vocabularies over the tokenizers live in bertjax.data (data/vocabularies.py):
    the tokenizers and everything below data stay free of seqio."""
    below = sorted(name for name, path in modules().items()
                   if layer(name) < layer("bertjax.data")
                   and "seqio" in third_party_imports(path))
    assert below == []


@pytest.mark.unit
def test_the_circle_finder_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


IMPORT_EVERYTHING = """
import ast, importlib, json, logging, os, pathlib, pkgutil, signal, sys
# The libraries bertjax imports set up the process their own ways (TensorFlow sets
# environment variables, absl adds an import hook): import every module they give bertjax
# first, so what changes after that is bertjax's doing.
for path in pathlib.Path("bertjax").rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module
                 and not node.level else [])
        for name in names:
            if name.split(".")[0] not in sys.stdlib_module_names | {"bertjax"}:
                try:
                    importlib.import_module(name)
                except ImportError:  # an optional library (torch) or a class, not a module
                    pass
state = lambda: (dict(os.environ), list(sys.meta_path), sys.unraisablehook,
                 {n: list(logging.getLogger(n).filters) for n in ("absl", "asyncio", "gcsfs")},
                 [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)])
before = state()
import bertjax
for module in pkgutil.walk_packages(bertjax.__path__, "bertjax."):
    importlib.import_module(module.name)
names = ("environment", "import hooks", "unraisable hook", "log filters", "signal handlers")
print(json.dumps([name for name, b, a in zip(names, before, state()) if b != a]))
"""


def test_importing_bertjax_changes_nothing_in_the_process():
    """Code that imports bertjax (a notebook, another library) gets no environment variables,
    import hooks, log filters or signal handlers from it: a tool's process set-up
    (cli/process.py), gs:// settings (files.py) and orbax's quiet reports (checkpoint.py) are
    made where they are needed, not at import."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "EPATH_USE_TF")}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True,
                         text=True, env=env, cwd=REPO_ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
