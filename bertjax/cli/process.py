"""The set-up of a bertjax tool's own process, done before JAX or TensorFlow start.

`prepare_tool_process` (called by `bertjax.cli` in a tool's process only; code that imports
bertjax gets none of it):

* JAX's backend: on a host with no accelerator device (no TPU, no GPU), JAX_PLATFORMS defaults
  to cpu. With libtpu installed for ahead-of-time compilation, JAX would otherwise probe for a
  TPU at start-up and log failures. Hosts with a TPU or GPU keep JAX's own choice, and an
  explicit JAX_PLATFORMS always wins. Each tool prints the backend it runs on at start.
* TensorFlow (used for tokenization in tf.data) is imported only by the modules that read or
  tokenize text (data sources, the WordPiece vocabulary) and by gin's registry of configurables
  (`gin_utils.parse`), so `--help` of bertjax-train, -compile, -export, -embed and -generate
  starts without it, and the core runs on accelerator images without TensorFlow.
  TensorFlow prints start-up lines ("Could not find cuda drivers",
  "oneDNN custom operations", CPU instruction notes) from C++ before its logging is
  configured, so TF_CPP_MIN_LOG_LEVEL cannot hide them: whenever it is first imported in a
  tool's process, they are captured and shown only if that import fails. TensorFlow is kept
  off GPUs, which JAX uses.
* Ctrl-C or SIGTERM while a tool's process imports its modules (seconds: JAX, TensorFlow)
  ends it with the tool's one line and exit status 130, not a 40-line KeyboardInterrupt
  traceback; the tool's own handling (cli/runner.py, training/preemption.py) takes over once
  it starts.
"""

import glob
import importlib.abc
import importlib.machinery
import os
import signal
import sys
import tempfile
from types import ModuleType

ACCELERATOR_DEVICE_FILES = (
    "/dev/accel*",  # TPU v4 and later
    "/dev/vfio/[0-9]*",  # TPU v2 / v3
    "/dev/nvidia[0-9]*",  # NVIDIA GPUs
    "/dev/kfd",  # AMD GPUs (ROCm)
)


def has_accelerator() -> bool:
    """True when the host exposes a TPU or GPU device."""
    return any(glob.glob(pattern) for pattern in ACCELERATOR_DEVICE_FILES)


class _QuietLoader(importlib.abc.Loader):
    """Runs TensorFlow's own loader with file descriptor 2 captured (replayed on failure, but
    not on Ctrl-C or SIGTERM: an interrupted import is no failure to explain), then hides the
    GPUs from TensorFlow."""

    def __init__(self, loader: importlib.abc.Loader):
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with tempfile.TemporaryFile() as captured:
            saved_stderr = os.dup(2)
            os.dup2(captured.fileno(), 2)
            try:
                module.__loader__ = module.__spec__.loader = self.loader  # resources, reloads
                self.loader.exec_module(module)
                module.config.set_visible_devices([], "GPU")
            except KeyboardInterrupt:
                raise
            except BaseException:
                os.dup2(saved_stderr, 2)
                captured.seek(0)
                os.write(2, captured.read())
                raise
            finally:
                os.dup2(saved_stderr, 2)
                os.close(saved_stderr)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as the other finders do and gives it the quiet loader. It stays in
    place after a lookup: libraries probe for TensorFlow with `importlib.util.find_spec`
    (flax.io, etils) long before a module imports it, and the import that follows must still
    get the quiet loader; once TensorFlow is loaded, imports find it in sys.modules."""

    def find_spec(self, name: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


TRAINING_TOOLS = ("bertjax-train", "bertjax-finetune", "bertjax-glue")


def tool_name() -> str | None:
    """The bertjax tool this process runs (a console script, or python -m bertjax.cli.NAME),
    or None when bertjax is imported by other code (a notebook, the tests)."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script.startswith("bertjax-"):
        return script
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        if module.startswith("bertjax.cli.") and module.count(".") == 2:
            return "bertjax-" + module.rsplit(".", 1)[1].replace("_", "-")
    return None


def _interrupted_while_starting(signum: int, frame: object) -> None:
    del frame
    tool = tool_name() or "bertjax"
    why = signal.Signals(signum).name
    line = (f"{tool}: interrupted before training started ({why}): nothing was saved"
            if tool in TRAINING_TOOLS else f"{tool}: interrupted")
    os.write(2, (line + "\n").encode())
    os._exit(130)


def prepare_tool_process() -> None:
    """Set up a tool's process before JAX or TensorFlow start (see the module docstring):
    JAX's backend, TensorFlow's start-up lines, and Ctrl-C / SIGTERM while modules import.
    Called once, by `bertjax.cli` when it is imported in a tool's own process."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if not has_accelerator():
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if "tensorflow" not in sys.modules and not any(
            isinstance(finder, _QuietTensorFlowFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowFinder())
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupted_while_starting)
