"""Execute the notebooks headless (nbclient), each in a scratch directory, and save their outputs.

    python scripts/run_notebooks.py                       # every notebook, full settings, saved
    python scripts/run_notebooks.py --tiny --no-save notebooks/attention.ipynb   # a quick check

The kernel imports bertjax from this checkout (PYTHONPATH), sees one CPU device (as in Colab:
the test suite's fake-device XLA_FLAGS are dropped) and runs in a fresh temporary directory,
so training runs and pictures never land in the repository. `--tiny` sets
BERTJAX_NOTEBOOK_TINY=1: each notebook shrinks its steps and sizes. Saved outputs must not
name a machine path (MACHINE_PATH); tests/notebooks checks that of every saved notebook.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
TINY_VARIABLE = "BERTJAX_NOTEBOOK_TINY"
MACHINE_PATH = re.compile(r"/(work|tmp|root|home|Users|content)/")
TEXT_OUTPUTS = ("text/plain", "text/html", "text/markdown", "application/json")
# The C++ lines TensorFlow and XLA print on stderr when imported (oneDNN, no CUDA driver, ...):
# timestamps and process ids that say nothing about the notebook and change on every run.
STARTUP_LOG = re.compile(r"^([IWEF]\d{4} \d\d:\d\d:\d\d|[IWEF]0000 |WARNING: All log messages "
                         r"before absl::InitializeLog\(\))")


def kernel_env(tiny: bool) -> dict[str, str]:
    """The kernel's environment: this checkout first on PYTHONPATH, one CPU device, tiny or not."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    if tiny:
        env[TINY_VARIABLE] = "1"
    else:
        env.pop(TINY_VARIABLE, None)
    return env


def execute(path: pathlib.Path, tiny: bool, budget_seconds: float | None = None,
            cwd: pathlib.Path | None = None):
    """The notebook (an nbformat node) after running every cell in a fresh kernel.

    `budget_seconds` bounds the whole notebook: each cell may take what is left of it, so a
    cell that hangs fails with nbclient's timeout error instead of stalling the caller.
    A cell that raises fails the run (nbclient.exceptions.CellExecutionError).
    """
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds

    def remaining(cell) -> int | None:
        return None if deadline is None else max(1, int(deadline - time.monotonic()))

    with tempfile.TemporaryDirectory(prefix="bertjax_notebook_") as scratch:
        client = nbclient.NotebookClient(
            nb, kernel_name="python3", timeout_func=remaining, record_timing=False,
            startup_timeout=120, resources={"metadata": {"path": str(cwd or scratch)}},
        )
        client.execute(env=kernel_env(tiny))
    drop_startup_log(nb)
    return nb


def drop_startup_log(nb) -> None:
    """Remove the STARTUP_LOG lines from stderr outputs (and outputs left empty by that)."""
    for cell in nb.cells:
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                lines = [line for line in out["text"].splitlines(keepends=True)
                         if not STARTUP_LOG.match(line)]
                if not "".join(lines).strip():
                    continue
                out["text"] = "".join(lines)
            kept.append(out)
        if cell.cell_type == "code":
            cell.outputs = kept


def output_texts(nb) -> list[str]:
    """Every text a saved output shows (streams, plain/HTML results, errors); images excluded."""
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append("".join(out.get("text", "")))
            elif out.get("output_type") == "error":
                texts.append("\n".join([out.get("evalue", ""), *out.get("traceback", [])]))
            for kind in TEXT_OUTPUTS:
                value = out.get("data", {}).get(kind)
                if value is not None:
                    texts.append(value if isinstance(value, str) else "".join(map(str, value)))
    return texts


def machine_paths(nb) -> list[str]:
    """The output lines that name a machine-specific absolute path."""
    return [line for text in output_texts(nb) for line in text.splitlines()
            if MACHINE_PATH.search(line)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path,
                        default=sorted(NOTEBOOKS.glob("*.ipynb")))
    parser.add_argument("--tiny", action="store_true", help=f"set {TINY_VARIABLE}=1")
    parser.add_argument("--no-save", dest="save", action="store_false",
                        help="run only; leave the .ipynb files as they are")
    args = parser.parse_args()
    import nbformat

    for path in args.notebooks:
        start = time.perf_counter()
        nb = execute(path, args.tiny)
        leaks = machine_paths(nb)
        print(f"{path.name}: ran in {time.perf_counter() - start:.0f}s"
              + (f"; {len(leaks)} output line(s) name a machine path" if leaks else ""))
        for line in leaks:
            print("   ", line)
        if args.save and not leaks:
            nbformat.write(nb, path)
        elif args.save:
            print(f"    not saved: {path.name} would leak those paths", file=sys.stderr)


if __name__ == "__main__":
    main()
