"""bertjax's modules import one another in layers, without a circle.

The graph is read from the source with `ast`: every `import` and `from ... import` of a
bertjax module counts, at the top of a file, inside a function or under TYPE_CHECKING alike,
and a package that imports all its modules by discovery (`pkgutil.iter_modules(__path__)`,
the task and family registries) counts as importing each of them.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "bertjax"

# Lower layers first; a module may import its own layer and those below. The longest prefix
# names a module's layer. bertjax-export reads fine-tuning runs' task records, so it sits
# above finetune, which loads checkpoints through the converters below it.
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
    ("bertjax.convert.export", "bertjax.analysis"),
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


def test_the_graph_sees_imports_inside_functions_and_by_discovery(graph):
    assert "bertjax.finetune.runner" in graph["bertjax.finetune"]  # inside __getattr__
    assert "bertjax.finetune.tasks.classification" in graph["bertjax.finetune.tasks"]
    assert "bertjax.finetune.families.gpt" in graph["bertjax.finetune.families"]
    assert "bertjax.tokenizers.wordpiece" in graph["bertjax.finetune.families.bert"]


def test_no_import_circles(graph):
    assert cycles(graph) == []


def test_no_module_imports_a_higher_layer(graph):
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                    if layer(b) > layer(a))
    assert upward == []


def test_the_circle_finder_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
