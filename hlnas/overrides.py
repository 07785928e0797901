"""``--set SECTION.KEY=VALUE`` overrides, parsed in one place and checked against the typed config they change.

Each value is read as YAML in hlnas's dialect (:func:`yaml_load`), then made the type of its field:

- ``int``: an integer, or a number or string that is exactly one (``1e5`` -> 100000); ``12.5`` and ``abc`` are refused
- ``float``: any number
- ``bool``: a YAML boolean (``true``/``false``)
- ``str``: the text as written, so ``train.autocast=off`` stays ``'off'`` (YAML 1.1 would read ``false``)
- ``X | None``: ``null`` as well; in any union a value that already has one of the types keeps it
- ``tuple``/``list``: a YAML list, each element checked
- ``dict``: a YAML mapping, or keys below the field to any depth (``model.mixer_hparams.gla.num_heads=2``);
  what is inside a mapping is left as YAML read it, for the config that owns it to check
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

import yaml

from hlnas.errors import ConfigError, did_you_mean

__all__ = ["yaml_load", "field_types", "parse_sets", "typed_fields", "config_from_dict"]


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``6:1`` as the base-60 integer 361; ratios must stay strings."""


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.1 also wants a dot in floats, so 1e-3 would stay a string; accept it as a number.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?([0-9][0-9_]*)?\.?[0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789.")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(0|[1-9][0-9_]*|0x[0-9a-fA-F_]+|0o?[0-7_]+)$"), list("-+0123456789")
)


def yaml_load(text: str):
    return yaml.load(text, Loader=_Loader)


def field_types(cls: type) -> dict[str, object]:
    """Field name -> type of dataclass ``cls`` (its annotations are strings under ``from __future__ import annotations``)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def typed_fields(cls: type, data: Mapping, kind: str) -> dict:
    """``data`` (a mapping read from YAML, JSON or a stored study) checked key by key against dataclass ``cls``:
    unknown keys refused with the allowed ones, each value made its field's type by the rules above
    (``tokens: 1e5`` -> 100000; ``seq_len: 12.5`` refused, naming ``kind.seq_len``, its type and the value)."""
    from hlnas.errors import check_fields

    check_fields(kind, data, cls)
    types_ = field_types(cls)
    out = {}
    for key, value in data.items():
        try:
            out[key] = _convert(value, None, types_[key])
        except _Mismatch:
            raise ConfigError(f"{kind}.{key} is {_describe(types_[key])}; got {value!r}") from None
        if isinstance(out[key], list) and (typing.get_origin(types_[key]) or types_[key]) is tuple:
            out[key] = tuple(out[key])
    return out


def config_from_dict(cls: type, data: Mapping, kind: str):
    """``cls(**typed_fields(cls, data, kind))``: the one way every config is read back from plain data."""
    return cls(**typed_fields(cls, data, kind))


def parse_sets(items: list[str], sections: Mapping[str, type | Mapping[str, object]],
               base: Mapping[str, object] | None = None) -> dict[str, dict]:
    """``["train.lr=3e-4", "model.mixer_hparams.gla.num_heads=2"]`` as ``{section: settings}`` for the sections
    the items touch, each applied over ``base``'s section (not changed). ``sections`` maps a section name to its
    dataclass, or to ``{key: type}``. Raises :class:`ConfigError` naming the item on a malformed item, an unknown
    section or key, or a value of the wrong type."""
    schemas = {name: field_types(spec) if isinstance(spec, type) else spec for name, spec in sections.items()}
    base = base or {}
    out: dict[str, dict] = {}
    for item in items:
        section, path, text = _split(item, schemas)
        value = _value(item, section, path, schemas[section], text)
        start = out.get(section, base.get(section))
        # a section that is not a mapping yet (absent, or a layout string being refined field by field) starts empty
        out[section] = _put(start if isinstance(start, dict) else {}, path, value)
    return out


def _split(item: str, schemas: Mapping[str, Mapping]) -> tuple[str, list[str], str]:
    key, eq, text = item.partition("=")
    section, _, rest = key.partition(".")
    path = rest.split(".")
    if not eq or not all(path) or not section:
        raise ConfigError(f"--set {item}: write SECTION.KEY=VALUE with SECTION one of {', '.join(schemas)}")
    if section not in schemas:
        raise ConfigError(f"--set {item}: unknown section '{section}'.{did_you_mean(section, schemas)} "
                          f"Allowed: {', '.join(schemas)}")
    if path[0] not in schemas[section]:
        allowed = sorted(schemas[section])
        raise ConfigError(f"--set {item}: unknown {section} key '{path[0]}'.{did_you_mean(path[0], allowed)} "
                          f"Allowed: {', '.join(allowed)}")
    return section, path, text


def _value(item: str, section: str, path: list[str], schema: Mapping[str, object], text: str):
    try:
        value = yaml_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item}: the value is not valid YAML ({getattr(e, 'problem', None) or e})") from None
    name, hint = f"{section}.{path[0]}", schema[path[0]]
    if len(path) > 1:
        if not any(_is_dict(arm) for arm in _arms(hint)):
            raise ConfigError(f"--set {item}: {name} is {_describe(hint)} and has no keys")
        return value
    try:
        return _convert(value, text, hint)
    except _Mismatch:
        raise ConfigError(f"--set {item}: {name} is {_describe(hint)}; got {text or 'nothing'}") from None


def _put(node: dict, path: list[str], value) -> dict:
    """A copy of ``node`` with ``value`` at ``path``; mappings on the way are copied too, other values replaced."""
    out = dict(node)
    head, *rest = path
    if rest:
        child = out.get(head)
        value = _put(child if isinstance(child, dict) else {}, rest, value)
    out[head] = value
    return out


class _Mismatch(Exception):
    """A value that neither has nor converts to a type."""


def _arms(hint) -> tuple:
    return typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else (hint,)


def _is_dict(hint) -> bool:
    return (typing.get_origin(hint) or hint) is dict


def _convert(value, text: str | None, hint):
    """``value`` as type ``hint``. ``text`` is what was written, for a top-level value (None inside a list)."""
    for lenient in (False, True):  # a value that already has one of a union's types keeps it: 6 in str | int stays 6
        for arm in _arms(hint):
            try:
                return _as(arm, value, text, lenient)
            except _Mismatch:
                pass
    raise _Mismatch


def _as(hint, value, text: str | None, lenient: bool):
    origin = typing.get_origin(hint) or hint
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise _Mismatch
        args = typing.get_args(hint)  # (X,) or (X, ...), or () for a bare list
        return [_convert(v, None, args[0]) for v in value] if args else value  # a list: YAML can write it back
    if origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        return value
    if hint in _SCALARS:
        return _SCALARS[hint](value, text, lenient)
    return value  # a type with no rule here: left to the config's own checks


def _none(value, text, lenient):
    if value is None:
        return None
    raise _Mismatch


def _bool(value, text, lenient):
    if isinstance(value, bool):
        return value
    raise _Mismatch


def _int(value, text, lenient):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not lenient or not isinstance(value, (float, str)):
        raise _Mismatch
    try:  # repr is the shortest text that reads back as the float, so 1e30 gives 10**30, not int(1e30)'s rounding
        d = Decimal(repr(value) if isinstance(value, float) else value)
    except InvalidOperation:
        raise _Mismatch from None
    if not d.is_finite() or d != d.to_integral_value():
        raise _Mismatch
    return int(d)


def _float(value, text, lenient):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if not lenient or not isinstance(value, str):
        raise _Mismatch
    try:
        return float(value)
    except ValueError:
        raise _Mismatch from None


def _str(value, text, lenient):
    if isinstance(value, str):
        return value
    if lenient and text is not None and isinstance(value, (int, float, bool)):  # off, 2024, 1e3: the text as written
        return text.strip()
    raise _Mismatch


_SCALARS = {type(None): _none, bool: _bool, int: _int, float: _float, str: _str}
_NAMES = {type(None): ("null", "nulls"), bool: ("true or false", "booleans"), int: ("an integer", "integers"),
          float: ("a number", "numbers"), str: ("a string", "strings")}


def _describe(hint, plural: bool = False) -> str:
    """``int | None`` -> 'an integer or null', ``tuple[float, ...]`` -> 'a list of numbers'."""
    arms = _arms(hint)
    if len(arms) > 1:
        return " or ".join(_describe(arm, plural) for arm in arms)
    origin = typing.get_origin(hint) or hint
    if origin in (list, tuple):
        args = typing.get_args(hint)
        return ("lists" if plural else "a list") + (f" of {_describe(args[0], True)}" if args else "")
    if origin is dict:
        return "mappings" if plural else "a mapping"
    return _NAMES.get(hint, (str(hint), str(hint)))[plural]
