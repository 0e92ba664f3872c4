"""Gin at the edge: config file lookup, `--gin.NAME=VALUE` flags, and one-line errors for
bad syntax, for values of another type than their setting's and for bindings nothing reads."""

import dataclasses
import difflib
import inspect
import pathlib
import tokenize
import types
import typing
from collections.abc import Mapping
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
    configs. Put first among gin's file readers (a private list; gin-config is pinned, and
    tests/test_configs.py fails when the list changes shape). gin's public
    `add_config_file_search_path` is not enough: gin asks every reader at one search prefix
    before the next, so its package-resource reader sees each include as `configs/...` first,
    logs 'Path not found' for each one, and raises a TypeError when `configs` is importable as
    a namespace package (a checkout on PYTHONPATH, run from another directory)."""
    reader = (lambda path: open(_find_config(path), encoding="utf-8"),
              lambda path: _find_config(path) is not None)
    if gin.config._FILE_READERS[0][0].__module__ != __name__:
        gin.config._FILE_READERS.insert(0, reader)


def parse(gin_files: list[str], bindings: list[str]) -> None:
    """Parse gin files and bindings; any error becomes one ConfigError line.

    Includes such as `include 'configs/models/bert_tiny.gin'` resolve against the working
    directory first, then bertjax's own configs.
    """
    import bertjax.configurables  # noqa: PLC0415 - registers every gin name; imported
    # here, not at the top, so a tool's --help and the tools that parse no gin file start
    # without the models and data modules
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
    check_types(bertjax.configurables.KEYWORD_SETTINGS)


# ---------------------------------------------------------------- the types of bound values


@dataclasses.dataclass(frozen=True)
class _Kind:
    """What a numeric (or on/off) setting takes: its Python types, whether None, in words."""

    types: tuple[type, ...]
    optional: bool
    words: str

    def fits(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool):
            return bool in self.types
        return isinstance(value, self.types)


_KINDS = {bool: ((bool,), "True or False"), int: ((int,), "a whole number"),
          float: ((int, float), "a number")}


def _kind(annotation: Any) -> _Kind | None:
    """The kind of an `int`, `float` or `bool` annotation (`| None` allowed); None for others."""
    members = (typing.get_args(annotation)
               if typing.get_origin(annotation) in (typing.Union, types.UnionType)
               else (annotation,))
    optional = type(None) in members
    kinds = [m for m in members if m is not type(None)]
    if len(kinds) != 1 or kinds[0] not in _KINDS:
        return None
    allowed, words = _KINDS[kinds[0]]
    return _Kind(allowed, optional, f"{words} or None" if optional else words)


def _setting_kinds(selector: str, keyword_settings: Mapping[str, Mapping[str, Any]]
                   ) -> dict[str, _Kind]:
    """{parameter: kind} of the configurable `selector`'s numeric and on/off parameters, from
    its type hints (a class: its __init__'s) and, for settings it takes as **kwargs, from
    `keyword_settings`."""
    try:
        configurable = gin.config._REGISTRY.get_match(selector)
    except (KeyError, ValueError):
        return {}
    if configurable is None:
        return {}
    target = configurable.wrapped
    target = target.__init__ if inspect.isclass(target) else target
    try:
        hints = dict(typing.get_type_hints(target))
    except Exception:  # noqa: BLE001 - hints that do not resolve: nothing to check against
        hints = {}
    hints.update(keyword_settings.get(configurable.name, {}))
    kinds = {name: _kind(hint) for name, hint in hints.items() if name != "return"}
    return {name: kind for name, kind in kinds.items() if kind is not None}


_UNBOUND = object()  # a macro no binding sets (gin names it when the run reads it)


def _macro_value(value: Any) -> tuple[Any, str | None]:
    """(the value a binding evaluates to, the macro it came through, if any), following
    macros (`%NUM_STEPS`) to their values; other references are returned as they are."""
    macro = None
    for _ in range(100):  # a chain of macros; gin refuses cycles itself when called
        key = getattr(value, "config_key", None)
        if not (isinstance(key, tuple) and key[1:] == ("gin.macro",)):
            break
        macro = key[0]
        value = gin.config._CONFIG.get(key, {}).get("value", _UNBOUND)
    return value, macro


def _plain(value: Any) -> bool:
    """A value written in the gin file itself (not a reference, an unbound macro nor
    %gin.REQUIRED)."""
    return value is not _UNBOUND and not type(value).__module__.startswith("gin")


def _described(value: Any) -> str:
    if isinstance(value, str):
        return f"{value!r} (quoted text)"
    return repr(value)


def _fix(setting: str, value: Any, kind: _Kind) -> str:
    """How to bind `setting` right: quoted text that reads as the kind, without its quotes."""
    if isinstance(value, str):
        try:
            number = int(value) if kind.types == (int,) else float(value)
        except ValueError:
            number = None
        if number is not None and kind.fits(number):
            return f"write {setting} = {value.strip()}, without quotes"
    return f"set {setting} to {kind.words}, unquoted"


def check_types(keyword_settings: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Raise a ConfigError naming the first binding of a numeric or on/off setting whose value
    is of another type (`NUM_STEPS = 'abc'`, `finetune.epochs = '3'`, a whole number given as
    2.5 or None): such a value would otherwise fail deep inside the run, or after the workdir
    was made. The settings' types are the configurables' own type hints; `keyword_settings`
    gives those of settings a configurable takes as **kwargs (configurable name -> {setting:
    type}). Reads gin's private binding table (gin-config is pinned)."""
    for (scope, selector), params in gin.config._CONFIG.items():
        if selector == "gin.macro":
            continue
        kinds = _setting_kinds(selector, keyword_settings or {})
        for param, bound in params.items():
            kind = kinds.get(param)
            value, macro = _macro_value(bound)
            if kind is None or not _plain(value) or kind.fits(value):
                continue
            name = _display(scope, selector, param)
            what = f"binding {name}" if macro is None else f"macro {macro}"
            reader = "it" if macro is None else name
            raise ConfigError(f"gin {what} is {_described(value)}, but {reader} takes "
                              f"{kind.words}: {_fix(macro or name, value, kind)}")


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
