"""The family adapters, one module each: every module in this package is imported and its
`@register`ed `Adapter` serves recipes of its (finetune.family, finetune.approach); see
bertjax.finetune.adapter."""

import importlib
import pkgutil

from bertjax.finetune.adapter import ADAPTERS, Adapter, SetupError

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def get_adapter(family: str, approach: str) -> type[Adapter]:
    """The adapter of (family, approach); one line naming the known ones otherwise."""
    if (family, approach) not in ADAPTERS:
        known = ", ".join(f"{f} ({a})" for f, a in sorted(ADAPTERS))
        raise SetupError(f"finetune.family={family!r} with finetune.approach={approach!r} has "
                         f"no adapter: choose one of {known}")
    return ADAPTERS[(family, approach)]
