"""``--set SECTION.KEY=VALUE`` overrides and config files, read in one place and checked against the typed config they change.

A config is a dataclass whose fields may be dataclasses themselves (``score.mqar`` is a ``MqarConfig``):
:func:`config_from_dict` builds one from a mapping, a nested mapping per nested field, and
:func:`config_to_dict` writes it back as plain JSON types; ``--set score.mqar.steps=200`` reaches a nested
field the same way. A config that renamed keys lists them in ``LEGACY_KEYS`` (old key -> new dotted key):
a mapping or ``--set`` giving an old key is read as the new one (:func:`migrate_keys`).

Each value is read as YAML in hlnas's dialect (:func:`yaml_load`), then made the type of its field:

- ``int``: an integer, or a number or string that is exactly one (``1e5`` -> 100000); ``12.5`` and ``abc`` are refused
- ``float``: any number
- ``bool``: a YAML boolean (``true``/``false``)
- ``str``: the text as written, so ``train.autocast=off`` stays ``'off'`` (YAML 1.1 would read ``false``)
- ``X | None``: ``null`` as well; in any union a value that already has one of the types keeps it
- ``tuple``/``list``: a YAML list, each element checked
- ``dict``: a YAML mapping, or keys below the field to any depth (``model.mixer_hparams.gla.num_heads=2``);
  what is inside a mapping is left as YAML read it, for the config that owns it to check
- a nested config: a mapping of its own fields, each checked by these rules (errors name the whole dotted key)
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

__all__ = ["dotted_diff", "yaml_load", "yaml_error_text", "field_types", "parse_sets", "typed_fields", "config_from_dict", "config_to_dict", "migrate_keys", "tuples_of",
           "at_least_one", "is_int", "is_number"]


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


def yaml_error_text(e: yaml.YAMLError) -> str:
    """A YAML syntax error in one line: where (line and column, counted from 1) and the problem, with what the parser
    was reading and where that began. PyYAML's own text spans several lines and names "<unicode string>"."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return " ".join(str(e).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        text += f" ({context}" + (f" that starts at line {start.line + 1}, column {start.column + 1}"
                                  if start is not None and (start.line, start.column) != (mark.line, mark.column) else "") + ")"
    return text


def field_types(cls: type) -> dict[str, object]:
    """Field name -> type of dataclass ``cls`` (its annotations are strings under ``from __future__ import annotations``)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _config_class(hint) -> type | None:
    """The dataclass a field of this type holds, or None (a field is a nested config when its type is one)."""
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def migrate_keys(cls: type, data: Mapping, kind: str) -> dict:
    """``data`` with ``cls.LEGACY_KEYS``'s old keys moved to their new dotted places (``mqar_steps`` ->
    ``{mqar: {steps: ...}}``); a setting given both ways is refused, naming both keys. Nested configs' own
    legacy keys are left to them."""
    legacy = getattr(cls, "LEGACY_KEYS", {})
    out = dict(data)
    for old in [k for k in data if k in legacy]:
        *parents, leaf = legacy[old].split(".")
        node = out
        for i, part in enumerate(parents):
            child = node.get(part)
            if child is not None and not isinstance(child, Mapping):
                raise ConfigError(f"{kind}.{'.'.join(parents[:i + 1])} must be a mapping of its settings, got {child!r}")
            node[part] = node = dict(child or {})
        if leaf in node:
            raise ConfigError(f"{kind}.{old} and {kind}.{legacy[old]} are the same setting ({old} is its old name); "
                              f"give only {kind}.{legacy[old]}")
        node[leaf] = out.pop(old)
    return out


def typed_fields(cls: type, data: Mapping, kind: str) -> dict:
    """``data`` (a mapping read from YAML, JSON or a stored study) checked key by key against dataclass ``cls``:
    old keys migrated (:func:`migrate_keys`), unknown keys refused with the allowed ones, each value made its
    field's type by the rules above (``tokens: 1e5`` -> 100000; ``seq_len: 12.5`` refused, naming
    ``kind.seq_len``, its type and the value), a nested config's mapping built into that config."""
    from hlnas.errors import check_fields

    if not isinstance(data, Mapping):
        raise ConfigError(f"{kind} must be a mapping of its settings, got {data!r}")
    data = migrate_keys(cls, data, kind)
    check_fields(kind, data, cls)
    types_ = field_types(cls)
    out = {}
    for key, value in data.items():
        sub = _config_class(types_[key])
        if sub is not None:
            out[key] = value if isinstance(value, sub) else config_from_dict(sub, value, f"{kind}.{key}")
            continue
        try:
            out[key] = _convert(value, None, types_[key])
        except _Mismatch:
            raise ConfigError(f"{kind}.{key} is {_describe(types_[key])}; got {value!r}") from None
        if isinstance(out[key], list) and (typing.get_origin(types_[key]) or types_[key]) is tuple:
            out[key] = tuple(out[key])
    return out


def is_int(x) -> bool:
    """A whole number as a setting means it: an ``int`` but not a ``bool`` (``True`` is an int in Python)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x) -> bool:
    """An ``int`` or ``float`` but not a ``bool``."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def tuples_of(cfg, *names: str) -> None:
    """Freeze list fields of a frozen config (YAML gives lists) into tuples, in place."""
    for name in names:
        object.__setattr__(cfg, name, tuple(getattr(cfg, name)))


def at_least_one(cfg, section: str, *names: str) -> None:
    """Refuse a count field of ``section`` below 1, naming it and the value got."""
    for name in names:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{section}.{name} must be >= 1, got {getattr(cfg, name)}")


def config_from_dict(cls: type, data: Mapping, kind: str):
    """``cls(**typed_fields(cls, data, kind))``: the one way every config is read back from plain data."""
    return cls(**typed_fields(cls, data, kind))


def config_to_dict(obj) -> dict:
    """A config as plain JSON types, what :func:`config_from_dict` reads back: nested configs as mappings,
    tuples as lists, mappings and lists copied."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def parse_sets(items: list[str], sections: Mapping[str, type | Mapping[str, object]],
               base: Mapping[str, object] | None = None) -> dict[str, dict]:
    """``["train.lr=3e-4", "score.mqar.steps=200", "model.mixer_hparams.gla.num_heads=2"]`` as ``{section:
    settings}`` for the sections the items touch, each applied over ``base``'s section (not changed). ``sections``
    maps a section name to its dataclass, or to ``{key: type}``; a key may go down into nested configs. An old key
    of a dataclass's ``LEGACY_KEYS`` (``score.mqar_steps``) sets its new one, and ``base``'s section is migrated
    the same way (:func:`migrate_keys`). Raises :class:`ConfigError` naming the item on a malformed item, an
    unknown section or key, or a value of the wrong type."""
    base = base or {}
    out: dict[str, dict] = {}
    for item in items:
        section, path, name, hint, below = _split(item, sections)
        value = _value(item, name, hint, below, item.partition("=")[2])
        if section in out:
            start = out[section]
        else:  # a section that is not a mapping yet (absent, or a layout string refined field by field) starts empty
            start = base.get(section)
            start = start if isinstance(start, Mapping) else {}
            if isinstance(sections[section], type):
                start = migrate_keys(sections[section], start, section)
        out[section] = _put(start, path, value)
    return out


def _split(item: str, sections: Mapping[str, type | Mapping[str, object]]) -> tuple[str, list[str], str, object, bool]:
    """``(section, key path, dotted name of the field it reaches, that field's type, whether the path goes on
    below that field)``, old keys of ``LEGACY_KEYS`` replaced by their new ones on the way."""
    key, eq, _ = item.partition("=")
    section, _, rest = key.partition(".")
    path = rest.split(".")
    if not eq or not all(path) or not section:
        raise ConfigError(f"--set {item}: write SECTION.KEY=VALUE with SECTION one of {', '.join(sections)}")
    if section not in sections:
        raise ConfigError(f"--set {item}: unknown section '{section}'.{did_you_mean(section, sections)} "
                          f"Allowed: {', '.join(sections)}")
    spec, name, i = sections[section], section, 0
    while True:
        if isinstance(spec, type):
            legacy = getattr(spec, "LEGACY_KEYS", {})
            if path[i] in legacy:  # score.mqar_steps: its new key, score.mqar.steps
                path[i:i + 1] = legacy[path[i]].split(".")
            schema = field_types(spec)
        else:
            schema = spec
        head = path[i]
        if head not in schema:
            allowed = sorted(schema)
            raise ConfigError(f"--set {item}: unknown {name} key '{head}'.{did_you_mean(head, allowed)} "
                              f"Allowed: {', '.join(allowed)}")
        spec, name, i = schema[head], f"{name}.{head}", i + 1
        if _config_class(spec) is None:
            return section, path, name, spec, i < len(path)
        if i == len(path):
            raise ConfigError(f"--set {item}: {name} is a section; set its keys ({name}.KEY=VALUE), one of "
                              f"{', '.join(sorted(field_types(spec)))}")


def _value(item: str, name: str, hint, below: bool, text: str):
    try:
        value = yaml_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item}: the value is not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if below:
        if not any(_is_dict(arm) for arm in _arms(hint)):
            raise ConfigError(f"--set {item}: {name} is {_describe(hint)} and has no keys")
        return value
    try:
        return _convert(value, text, hint)
    except _Mismatch:
        raise ConfigError(f"--set {item}: {name} is {_describe(hint)}; got {text or 'nothing'}") from None


def _put(node: Mapping, path: list[str], value) -> dict:
    """A copy of ``node`` with ``value`` at ``path``; mappings on the way are copied too, other values replaced."""
    out = dict(node)
    head, *rest = path
    if rest:
        child = out.get(head)
        value = _put(child if isinstance(child, Mapping) else {}, rest, value)
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
    if is_int(value):
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
    if is_number(value):
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


_UNSET = object()


def _flatten(d: Mapping, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):  # an empty section is the same as an absent one
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def dotted_diff(a: Mapping, b: Mapping, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """What differs between two nested settings, one ``key: old -> new`` line per dotted key (a key in ``ignore``, or
    below one, does not count; a key on one side only shows the other as ``(unset)``)."""
    fa, fb = _flatten(a), _flatten(b)
    show = lambda v: "(unset)" if v is _UNSET else repr(v)  # noqa: E731
    out = []
    for key in [*fa, *(k for k in fb if k not in fa)]:
        if any(key == k or key.startswith(k + ".") for k in ignore):
            continue
        if fa.get(key, _UNSET) != fb.get(key, _UNSET):
            out.append(f"{key}: {show(fa.get(key, _UNSET))} -> {show(fb.get(key, _UNSET))}")
    return out
