"""Run a bertjax command-line tool inside the test process.

A tool started with `subprocess` pays its imports (TensorFlow, JAX, seqio: seconds) and its
compiles every time. What a test asks of most runs (exit status, the one error line, the files
left behind) does not depend on a fresh process, so those run here: same flags, same `run()`
entry point as the console script, stdout and stderr captured, the exit status from
SystemExit. Tests about the process itself (signals, kill -9, TensorFlow's C++ start-up
output, --help per tool) keep using real processes.

The test process has 8 fake CPU devices; the training tools run here on a mesh of the first
one (`make_mesh.num_devices`), like the tools that tests start as processes (process_env): a
run here compiles the same programs as a run there, so each finds the other's in the suite's
compilation cache, and a single-device program compiles quicker than a partitioned one. Sharding
itself is checked where meshes are built (tests/training/test_step.py and others); a test that
needs another mesh passes its own --gin.make_mesh.* bindings.
"""

import contextlib
import importlib
import io
import logging
import os
import subprocess
import sys

import gin
from absl import flags
from absl import logging as absl_logging

MESH_TOOLS = ("bertjax.cli.train", "bertjax.cli.finetune", "bertjax.cli.glue")
MESH_DEVICES = 1


@contextlib.contextmanager
def _working_directory(path: os.PathLike | str | None):
    before = os.getcwd()
    if path is not None:
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run_tool(module: str, *args: object, cwd: os.PathLike | str | None = None
             ) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS...` in this process: a CompletedProcess with the exit status and
    what the tool printed. Flags and gin are reset before and after, so runs do not leak."""
    tool = importlib.import_module(module)
    argv = [module, *map(str, args)]
    if module in MESH_TOOLS and not any(a.startswith("--gin.make_mesh.") for a in argv):
        argv.append(f"--gin.make_mesh.num_devices={MESH_DEVICES}")
    out, err = io.StringIO(), io.StringIO()
    flags.FLAGS.unparse_flags()
    gin.clear_config()
    # A tool's process logs through absl's handler on the root logger (app.run installs it,
    # once per process): it is there for each run and taken away after, with the verbosity
    # the tool sets, so later tests see logging as it was.
    saved_root_handlers, saved_verbosity = list(logging.root.handlers), absl_logging.get_verbosity()
    handler = absl_logging.get_absl_handler()
    if handler not in logging.root.handlers:
        logging.root.addHandler(handler)
    log = handler.python_handler  # warnings go to stderr, as they would
    saved_argv, saved_log_stream, code = sys.argv, log.stream, 0
    sys.argv, log.stream = argv, err
    try:
        with (_working_directory(cwd), contextlib.redirect_stdout(out),
              contextlib.redirect_stderr(err)):
            tool.run()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        if isinstance(exit_.code, str):  # sys.exit("message"): Python prints it
            err.write(exit_.code + "\n")
    finally:
        sys.argv, log.stream = saved_argv, saved_log_stream
        logging.root.handlers[:] = saved_root_handlers
        absl_logging.set_verbosity(saved_verbosity)
        flags.FLAGS.unparse_flags()
        gin.clear_config()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
