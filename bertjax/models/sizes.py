"""Family configs built from flat settings: `bert_config("tiny", hidden_size=64, vocab_size=512)`.

BertConfig and GptConfig hold their own fields (vocabulary, positions) and one
`transformer: TransformerConfig`; ElmoConfig holds only its own. Users name every setting flat
(`gpt_config.remat = True` in gin, `hidden_size=` in Python, the flat model.json of older runs):
`FamilyConfig.from_dict` routes each name to the field that holds it, and a name held nowhere
fails with one line giving the closest valid name and the gin name to fix.
"""

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

from bertjax.layers.transformer import TransformerConfig

TRANSFORMER = "transformer"  # the field of a family config that holds its TransformerConfig
TRANSFORMER_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerConfig))


def check_settings(names: Iterable[str], valid: Iterable[str], builder: str) -> None:
    """One line for the first of `names` that `builder` (its gin name) does not take."""
    valid = list(valid)
    for name in sorted(set(names) - set(valid)):
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ValueError(f"unknown setting {name!r} for {builder}: {hint}"
                         f"({builder} takes {', '.join(valid)})")


class FamilyConfig:
    """`from_dict` and `replace` for a family config: a frozen dataclass whose fields all have
    defaults, with BUILDER (its builder's gin name, named in errors) and, for a Transformer
    family, a `transformer` field."""

    BUILDER: ClassVar[str]

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The family's own settings: every field but the TransformerConfig."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != TRANSFORMER)

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """Every flat name the builder takes: the family's own, then the Transformer's."""
        has_transformer = len(cls.own_fields()) < len(dataclasses.fields(cls))
        return cls.own_fields() + (TRANSFORMER_FIELDS if has_transformer else ())

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> Self:
        """The config of `dataclasses.asdict(config)` or of flat settings (a size's defaults
        plus overrides, an older flat model.json). Flat Transformer names win over nested
        ones; settings not given are the class defaults."""
        fields = dict(fields)
        nested = fields.pop(TRANSFORMER, None) or {}
        if isinstance(nested, TransformerConfig):
            nested = dataclasses.asdict(nested)
        check_settings([*fields, *nested], cls.settings(), cls.BUILDER)
        own = {k: v for k, v in fields.items() if k in cls.own_fields()}
        transformer = {**nested, **{k: v for k, v in fields.items() if k not in own}}
        if not transformer:
            return cls(**own)
        defaults = dataclasses.asdict(cls().transformer)
        return cls(**own, transformer=TransformerConfig(**(defaults | transformer)))

    def replace(self, **overrides: Any) -> Self:
        """A copy with `overrides`: flat names, routed as the builder routes them."""
        return self.from_dict({**dataclasses.asdict(self), **overrides})
