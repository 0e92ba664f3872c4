"""Command-line entry points: one module per tool (train, finetune, glue, compile, export,
embed, generate, report, prepare), each flags, gin and one library call; runner.py holds what they
share (--help, flag parsing, one-line errors).

A tool's process is set up before JAX or TensorFlow start (cli/process.py: JAX's backend,
TensorFlow's start-up lines, Ctrl-C while modules import). That set-up runs here, at the
package's import, because both ways a tool starts import this package first (a console script
imports `bertjax.cli.<tool>`; `python -m bertjax.cli.<tool>` imports the package before the
module's own imports), and only when the process is a tool's: code that imports bertjax (a
notebook, the tests, another library) gets no environment variables, import hooks or signal
handlers from it.
"""

from bertjax.cli.process import TRAINING_TOOLS, has_accelerator, prepare_tool_process, tool_name

__all__ = ["TRAINING_TOOLS", "has_accelerator", "prepare_tool_process", "tool_name"]

if tool_name() is not None:
    prepare_tool_process()
