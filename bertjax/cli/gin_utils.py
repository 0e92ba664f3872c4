"""Gin at the edge: external configurables, `--gin.NAME=VALUE` flags, one-line errors."""

import pathlib
import sys

import gin

from bertjax.data.elmo_pipeline import ElmoSource
from bertjax.data.lm import LmPretrainingSource
from bertjax.data.pipeline import BertPretrainingSource
from bertjax.models.bert import bert_config
from bertjax.models.elmo import elmo_config
from bertjax.models.gpt import gpt_config
from bertjax.objectives.bilm import elmo_pretraining_task
from bertjax.objectives.lm import gpt_pretraining_task
from bertjax.objectives.pretraining import bert_pretraining_task
from bertjax.training.elmo_optim import adagrad_optimizer
from bertjax.training.mesh import make_mesh
from bertjax.training.optim import make_optimizer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

gin.external_configurable(bert_config, module="bertjax")
gin.external_configurable(bert_pretraining_task, module="bertjax")
gin.external_configurable(make_mesh, module="bertjax")
gin.external_configurable(make_optimizer, module="bertjax")
gin.external_configurable(BertPretrainingSource, "bert_pretraining_source", module="bertjax")
gin.external_configurable(gpt_config, module="bertjax")
gin.external_configurable(gpt_pretraining_task, module="bertjax")
gin.external_configurable(LmPretrainingSource, "lm_pretraining_source", module="bertjax")
gin.external_configurable(elmo_config, module="bertjax")
gin.external_configurable(elmo_pretraining_task, module="bertjax")
gin.external_configurable(ElmoSource, "elmo_source", module="bertjax")
gin.external_configurable(adagrad_optimizer, module="bertjax")


class ConfigError(ValueError):
    """A gin file or binding that cannot be used."""


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


def _resolve(path: str) -> str:
    """Gin files are found as given, or relative to the repository (configs/...)."""
    for candidate in (pathlib.Path(path), REPO_ROOT / path):
        if candidate.is_file():
            return str(candidate)
    configs = sorted(
        p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "configs").rglob("*.gin")
    )
    hint = ", ".join(c for c in configs if "experiments" in c)
    raise ConfigError(f"gin file {path!r} not found: choose one of {hint}")


def parse(gin_files: list[str], bindings: list[str]) -> None:
    """Parse gin files and bindings, turning gin's multi-line errors into one line."""
    gin.add_config_file_search_path(str(REPO_ROOT))
    files = [_resolve(f) for f in gin_files]
    try:
        gin.parse_config_files_and_bindings(files, bindings, finalize_config=False)
    except (ValueError, KeyError, SyntaxError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
        raise ConfigError(
            f"bad gin config ({first}): check the spelling against configs/ and "
            "the configurable's arguments"
        ) from err


def fail(program: str, err: BaseException) -> None:
    """Print `program: error: <one line>` and exit with status 2."""
    message = " ".join(str(err).split()) or type(err).__name__
    print(f"{program}: error: {message}", file=sys.stderr)
    sys.exit(2)
