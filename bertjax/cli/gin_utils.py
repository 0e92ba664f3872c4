"""Gin at the edge: config file lookup, `--gin.NAME=VALUE` flags, and
one-line errors for bad syntax and for bindings nothing reads."""

import difflib
import pathlib
import tokenize
from typing import Any

import gin


class ConfigError(ValueError):
    """A gin file or binding that cannot be used."""


def configured(name: str) -> Any:
    """Call the gin configurable `name` (e.g. "train") with its bindings; gin's error for a
    missing binding becomes one line."""
    try:
        return gin.get_configurable(f"bertjax.{name}")()
    except RuntimeError as err:
        if "Required bindings" not in str(err):
            raise
        first = str(err).strip().splitlines()[0]
        raise ConfigError(f"{first}: bind them in the gin file or with --gin.NAME=VALUE") from err


def config_roots() -> list[pathlib.Path]:
    """Directories holding bertjax's `configs/`: the installed package's copy (package data)
    and, in a source checkout, the repository's."""
    package = pathlib.Path(__file__).resolve().parents[1]
    return [root for root in (package, package.parent) if (root / "configs").is_dir()]


def rewrite_gin_args(argv: list[str]) -> list[str]:
    """Turn T5X-style `--gin.train.num_steps=10` flags into `--gin_bindings=train.num_steps=10`."""
    out = []
    for arg in argv:
        if arg.startswith("--gin.") and "=" in arg:
            name, value = arg[len("--gin.") :].split("=", 1)
            out.append(f"--gin_bindings={name} = {value}")
        else:
            out.append(arg)
    return out


def _find_config(path: str) -> pathlib.Path | None:
    for candidate in (pathlib.Path(path), *(root / path for root in config_roots())):
        if candidate.is_file():
            return candidate
    return None


def resolve(path: str) -> str:
    """A gin file as given (relative to the working directory), else bertjax's own copy."""
    found = _find_config(path)
    if found is not None:
        return str(found)
    names = sorted({p.relative_to(root).as_posix() for root in config_roots()
                    for p in (root / "configs" / "experiments").glob("*.gin")})
    close = difflib.get_close_matches(path, names, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ConfigError(f"gin file {path!r} not found: {hint}choose one of {', '.join(names)}")


def _use_bertjax_configs() -> None:
    """Let gin open `include 'configs/...'` from the working directory, else from bertjax's own
    configs. Put first among gin's file readers (a private list; gin-config is pinned): its
    package-resource reader would otherwise log 'Path not found' for each miss, and fails when
    `configs` happens to be importable as a namespace package."""
    reader = (lambda path: open(_find_config(path), encoding="utf-8"),
              lambda path: _find_config(path) is not None)
    if gin.config._FILE_READERS[0][0].__module__ != __name__:
        gin.config._FILE_READERS.insert(0, reader)


def parse(gin_files: list[str], bindings: list[str]) -> None:
    """Parse gin files and bindings; any error becomes one ConfigError line.

    Includes such as `include 'configs/models/bert_tiny.gin'` resolve against the working
    directory first, then bertjax's own configs.
    """
    import bertjax.configurables  # noqa: F401, PLC0415 - registers every gin name; imported
    # here, not at the top, so a tool's --help and the tools that parse no gin file start
    # without the data modules (TensorFlow, seqio: several seconds)
    _use_bertjax_configs()
    files = [resolve(f) for f in gin_files]
    try:
        gin.parse_config_files_and_bindings(files, bindings, finalize_config=False)
    except (ValueError, KeyError, TypeError, SyntaxError, OSError, tokenize.TokenError) as err:
        lines = str(err).strip().splitlines()
        first = lines[0] if lines else type(err).__name__
        raise ConfigError(
            f"bad gin config ({first}): check the syntax and the spelling against configs/ and "
            "the configurable's arguments"
        ) from err


def _display(scope: str, selector: str, param: str) -> str:
    if selector == "gin.macro":
        return scope
    name = f"{selector.rsplit('.', 1)[-1]}.{param}"
    return f"{scope}/{name}" if scope else name


def _is_read(scope: str, selector: str, param: str, operative: dict) -> bool:
    """A binding in `scope` applies to calls in that scope and those nested in it (any call,
    for the empty scope): was one of them made with `param`?"""
    return any(
        sel == selector and param in used
        and (not scope or called == scope or called.startswith(scope + "/"))
        for (called, sel), used in operative.items()
    )


def check_all_read(ignore: tuple[str, ...] = ()) -> None:
    """Raise a ConfigError naming the first binding or macro that nothing has read.

    Call it once the run has built everything it configures: a binding that nothing read is a
    misspelling (`--gin.num_steps` for NUM_STEPS) or belongs to another experiment. Bindings of
    configurables named in `ignore` are not checked. Reads gin's private binding tables
    (gin-config is pinned).
    """
    bound, operative = gin.config._CONFIG, gin.config._OPERATIVE_CONFIG
    read = [_display(scope, sel, p) for (scope, sel), params in operative.items() for p in params]
    for (scope, selector), params in bound.items():
        if selector.rsplit(".", 1)[-1] in ignore:
            continue
        for param in params:
            if _is_read(scope, selector, param, operative):
                continue
            name = _display(scope, selector, param)
            upper = {r.upper(): r for r in read}
            close = ([upper[name.upper()]] if name.upper() in upper
                     else difflib.get_close_matches(name, read, n=1, cutoff=0.6))
            hint = f"did you mean {close[0]}? " if close else ""
            kind = "macro" if selector == "gin.macro" else "binding"
            raise ConfigError(
                f"gin {kind} {name} is never read by this experiment: {hint}(gin names are "
                "case-sensitive; remove bindings that belong to other experiments)"
            )
