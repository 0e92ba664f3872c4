"""What every bertjax command-line tool shares: --help, flag errors, the backend line and the
one-line error path (`PROGRAM: error: ...`, exit status 2, nothing else on the terminal: orbax's
own failure reports are dropped in a tool's process, never in a library user's)."""

import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gin
import jax
from absl import app, flags
from absl import logging as absl_logging

from bertjax import cli, files
from bertjax.cli import gin_utils, interrupts
from bertjax.training import host_memory, lease, preemption
from bertjax.training.checkpoint import quiet_orbax_failures

if TYPE_CHECKING:
    from bertjax.training.loop import RunResult

FLAGS = flags.FLAGS
HELP_ARGS = ("--help", "-h", "-?", "--helpshort")


def one_line(err: BaseException) -> str:
    """The error's message on one line (its type name when it has none), without the
    "In call to configurable ..." trail gin appends to errors raised inside configurables."""
    message = str(err).split("\n  In call to configurable")[0]
    return " ".join(message.split()) or type(err).__name__


def fail(program: str, err: BaseException | str) -> None:
    """Print `program: error: <one line>` on stderr and exit with status 2 (a full disk: the
    file and the space left there)."""
    if files.is_no_space(err):
        err = files.no_space_message(err)
    message = err if isinstance(err, str) else one_line(err)
    print(f"{program}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def finish_run(program: str, result: "RunResult", workdir: os.PathLike,
               summary: Callable[[], str]) -> None:
    """The end of a training run (a `loop.RunResult`): process 0 records the operative
    config.gin of a run that trained and prints `summary()`; a run stopped by a signal or
    preemption then says where it stopped (its exit status is 0), and one that a signal
    reached only after its last step says that it is complete."""
    if jax.process_index() == 0:
        if result.step > result.start_step:  # a no-op run leaves the recorded config alone
            files.write_text(files.as_path(workdir) / "config.gin", gin.operative_config_str())
        print(summary())
    if result.stopped:
        print(f"{program}: stopped at step {result.step} ({result.stopped}): the checkpoint is "
              "saved; rerun the same command to resume", file=sys.stderr, flush=True)
    elif result.late_signal:
        print(f"{program}: {result.late_signal} came after the last step: the run is "
              "complete and saved", file=sys.stderr, flush=True)


def announce_backend(program: str) -> None:
    """One line on stderr: the JAX backend and the devices this run uses."""
    local, total = jax.local_device_count(), jax.device_count()
    hosts = f" over {jax.process_count()} processes" if jax.process_count() > 1 else ""
    print(f"{program}: JAX backend {jax.default_backend()}, {total} device(s){hosts} "
          f"({local} local)", file=sys.stderr, flush=True)


def define_once(define: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> None:
    """`define(name, *args, **kwargs)`, or, if a flag of that name exists, its default made
    this tool's: tools define their flags when they run, tests run several tools in one
    process, and two tools may give one name different defaults (--family: bertjax-glue's is
    bert, bertjax-prepare's none)."""
    if name not in FLAGS:
        define(name, *args, **kwargs)
    else:
        FLAGS.set_default(name, kwargs["default"] if "default" in kwargs else args[0])


def define_lease_flag() -> None:
    """--lease_timeout, for the tools that train in a workdir (see training/lease.py)."""
    define_once(flags.DEFINE_float, "lease_timeout", lease.DEFAULT_TIMEOUT,
                "Seconds after which a workdir lease on object storage that its run stopped "
                "renewing is taken over (local leases end with their process).")


def define_gin_flags() -> None:
    """--gin_file and --gin_bindings (also written --gin.NAME=VALUE), for tools that use gin."""
    define_once(flags.DEFINE_multi_string, "gin_file", [], "Gin file (repeatable), applied in "
                "order: a path, or one shipped with bertjax such as "
                "configs/experiments/bert_tiny_cpu.gin.")
    define_once(flags.DEFINE_multi_string, "gin_bindings", [], "Gin binding (repeatable); also "
                "written --gin.NAME=VALUE, e.g. --gin.NUM_STEPS=1000.")


def help_text(program: str, doc: str, modules: Sequence[str]) -> str:
    """The tool's description, then the flags its modules define."""
    sections = [doc.strip(), ""]
    for module in modules:
        text = FLAGS.module_help(module)
        if text:
            sections += [text.strip(), ""]
    sections.append(f"Errors are one line `{program}: error: ...` with exit status 2.")
    return "\n".join(sections)


def _parse_flags(program: str) -> Callable[[list[str]], list[str]]:
    def parse(argv: list[str]) -> list[str]:
        try:
            return FLAGS(argv)
        except flags.Error as err:
            fail(program, f"{one_line(err)} (see {program} --help)")
            raise  # unreachable: fail exits

    return parse


def guarded(program: str, main: Callable[..., None],
            positional: bool = False) -> Callable[[list[str]], None]:
    """`main` as absl's main(argv): ValueError / OSError end with one line and exit 2, and so
    do positional arguments, unless `positional` (then main receives them as a list)."""

    def run_main(argv: list[str]) -> None:
        if len(argv) > 1 and not positional:
            fail(program, f"unexpected argument {argv[1]!r}: flags are --name=value "
                          f"(quote values with spaces; see {program} --help)")
        if not FLAGS["verbosity"].present:  # progress lines only; --verbosity=0 shows INFO logs
            absl_logging.set_verbosity(absl_logging.WARNING)
        quiet_orbax_failures()  # orbax's tracebacks of a failure the tool says in one line
        preemption.forget_training()
        try:
            with _terminate_as_interrupt():
                if cli.tool_name() is not None and program not in cli.TRAINING_TOOLS:
                    interrupts.watch(program)  # Ctrl-C even while XLA compiles for minutes
                main(argv[1:]) if positional else main()
        except (ValueError, OSError) as err:
            fail(program, err)
        except preemption.Interrupted as err:  # a training tool, before training started
            exit_interrupted(interrupted_line(program, str(err)))
        except KeyboardInterrupt as err:  # Ctrl-C (no name), or SIGTERM (_Terminated's)
            exit_interrupted(interrupted_line(program, str(err) or "SIGINT"))

    return run_main


def interrupted_line(program: str, why: str) -> str:
    """The line of a tool that a signal `why` ("SIGINT") ended: a training tool that has not
    started training says that nothing was saved (docs/faults.md), whatever it was doing
    (reading its configuration, importing TensorFlow), before its run watched the signals."""
    if program in cli.TRAINING_TOOLS and not preemption.began_training():
        return f"{program}: interrupted before training started ({why}): nothing was saved"
    return f"{program}: interrupted"


def exit_interrupted(line: str) -> None:
    """Print `line` and end the process with status 130 at once, without finalizing the
    interpreter: a signal may arrive while XLA compiles on its own threads, and tearing down
    the JAX client under a compile that is still running crashed the process (a
    segmentation fault after the line). What the tool wrote was cleaned up as the interrupt
    went up (context managers, atomic files); local copies of gs:// files are removed here."""
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    files.remove_downloads()
    os._exit(130)


class _Terminated(KeyboardInterrupt):
    """SIGTERM in a tool that does not train: ends it as Ctrl-C does."""


class _terminate_as_interrupt:  # noqa: N801 - used as a context manager
    """SIGTERM raises, as Ctrl-C does, so what a tool leaves half done is cleaned up (its
    atomic outputs' temporary files); the training tools watch both signals themselves."""

    def __enter__(self) -> None:
        try:
            self.previous = signal.signal(signal.SIGTERM, self._raise)
            # Ctrl-C raises KeyboardInterrupt again (bertjax.cli's quiet start-up handler, which
            # covers the imports, ends here)
            self.previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread
            self.previous = None

    @staticmethod
    def _raise(signum: int, frame: object) -> None:
        raise _Terminated(signal.Signals(signum).name)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            signal.signal(signal.SIGINT, self.previous_int)


def run(program: str, doc: str, main: Callable[..., None], modules: Sequence[str],
        positional: bool = False, runs_steps: bool = True) -> None:
    """Parse the (already defined) flags, answer --help, then run `main` guarded (with the
    positional arguments, if `positional`). A tool that `runs_steps` first sets the host's
    malloc to keep freed memory where its steps run on the CPU (training/host_memory.py)."""
    argv = gin_utils.rewrite_gin_args(sys.argv)
    argv[0] = program
    if any(arg in HELP_ARGS for arg in argv[1:]):
        print(help_text(program, doc, modules))
        sys.exit(0)
    if runs_steps:
        try:
            host_memory.keep_freed_memory()
        except ValueError as err:
            fail(program, err)
    app.run(guarded(program, main, positional), argv=argv, flags_parser=_parse_flags(program))
