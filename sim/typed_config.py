"""Strict conversion between plain data (YAML) and typed dataclass configs.

Every config in robot-rl is a dataclass with defaults. :func:`from_dict` builds one from a (possibly partial) mapping
and fails on the first unknown key or wrong type with a message naming the full dotted key and the valid choices.
:func:`apply_override` applies ``a.b.c=value`` strings from the command line to the plain data before that check, so
overrides are validated exactly like the file. A list of records named by their ``param`` (randomisation terms) is
addressed by name: ``env.randomization.mass.range=[0.9, 1.1]`` changes that term and keeps the others,
``env.randomization.mass=null`` drops it, ``env.randomization=[...]`` replaces the list whole.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union

from policies.runtime import yamlfile

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration key, value or file is invalid; the message names it."""


def from_dict(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``, filling missing keys with defaults.

    A field whose type has a ``from_plain(data, path)`` classmethod (a family of config classes picked by a
    ``kind`` key, such as the student kinds) is built by it from its whole section.

    Args:
        cls: Dataclass type.
        data: Plain mapping (from YAML); ``None`` means all defaults.
        path: Dotted prefix used in error messages.

    Raises:
        ConfigError: Unknown key (valid keys are listed) or a value of the wrong type.
    """
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"'{path or '<root>'}' must be a mapping, got {type(data).__name__}: {data!r}")
    hints = typing.get_type_hints(cls)
    flds = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in data if k not in flds]
    if unknown:
        key = f"{path}.{unknown[0]}" if path else str(unknown[0])
        raise ConfigError(f"unknown config key '{key}'; valid keys here: {', '.join(sorted(flds))}")
    kwargs = {}
    for name, value in data.items():
        if not hasattr(hints[name], "from_plain"):  # a polymorphic section is read whole, by its own kind
            value = _merge_with_default(flds[name], value, f"{path}.{name}" if path else name)
        kwargs[name] = _convert(hints[name], value, f"{path}.{name}" if path else name)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid '{path or cls.__name__}': {exc}") from exc


def _merge_with_default(fld: dataclasses.Field[Any], value: Any, path: str) -> Any:
    """A partial mapping updates the field's default instead of replacing it.

    Task configs carry non-trivial defaults in nested sections (reward scales, sensor noise, robot parameters):
    ``env.reward_scales.position=-3`` changes one scale and keeps the others (set a scale to 0 to drop a term),
    ``env.noise.std.pos_w=0.01`` changes one noise level. A mapping given for a list of named records (e.g.
    ``randomization``) updates its entries by name (:func:`update_named`); a list replaces it whole.
    """
    if not isinstance(value, Mapping):
        return value
    if fld.default_factory is not dataclasses.MISSING:
        default = fld.default_factory()
    elif fld.default is not dataclasses.MISSING:
        default = fld.default
    else:
        return value
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        default = to_dict(default)
    if isinstance(default, list | tuple):
        return update_named(to_dict(list(default)), value, path)
    return _deep_merge(default, value) if isinstance(default, Mapping) else value


NAMED_BY = "param"
"""The key that names an entry of a list of records (a randomisation term's ``param``) in a dotted override."""


def update_named(items: list[Any], update: Mapping[str, Any], path: str) -> list[Any]:
    """The list ``items`` of records named by :data:`NAMED_BY`, with ``update`` applied by name: ``{name: {key:
    value}}`` merges into that entry, ``{name: None}`` drops it; the other entries stay as they are, in order.

    Raises:
        ConfigError: ``items`` is not a list of named records, or a name is unknown or names several entries.
    """
    if not all(isinstance(i, Mapping) and NAMED_BY in i for i in items):
        raise ConfigError(f"'{path}' is a list; set it whole ({path}=[...])")
    names = [str(i[NAMED_BY]) for i in items]
    out: list[Any] = [dict(i) for i in items]
    for name, change in update.items():
        hits = [k for k, n in enumerate(names) if n == str(name)]
        if not hits:
            raise ConfigError(f"'{path}' has no entry '{name}'; its entries: {', '.join(names) or 'none'}")
        if len(hits) > 1:
            raise ConfigError(f"'{path}' has {len(hits)} entries '{name}'; set the list whole ({path}=[...])")
        if change is not None and not isinstance(change, Mapping):
            raise ConfigError(
                f"'{path}.{name}' must be a mapping of the entry's keys, or null to drop it; got {change!r}"
            )
        out[hits[0]] = None if change is None else _deep_merge(out[hits[0]], change)
    return [i for i in out if i is not None]


def _deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"'{path}': {value!r} matches none of {args}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"'{path}' must be one of {', '.join(map(repr, args))}; got {value!r}")
        return value
    if hasattr(tp, "from_plain"):  # a dataclass family that picks its class from the data (``kind``)
        return tp.from_plain(value, path)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, path)  # type: ignore[arg-type]
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"'{path}' must be a list, got {type(value).__name__}: {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"'{path}' must have {len(args)} entries, got {len(value)}: {value!r}")
            return tuple(_convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
        item = args[0] if args else Any
        out = [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"'{path}' must be a mapping, got {type(value).__name__}: {value!r}")
        kt, vt = args or (Any, Any)
        return {_convert(kt, k, path): _convert(vt, v, f"{path}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, str) and _looks_numeric(value):  # YAML 1.1 reads "3e-4" as a string
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"'{path}' must be a number, got {type(value).__name__}: {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"'{path}' must be an integer, got {type(value).__name__}: {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"'{path}' must be true or false, got {type(value).__name__}: {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"'{path}' must be a string, got {type(value).__name__}: {value!r}")
        return value
    raise ConfigError(f"'{path}': unsupported config type {tp}")  # a bug in a config class, not user input


def to_dict(cfg: Any) -> Any:
    """Plain-data form of a dataclass config (tuples become lists), ready for YAML."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, list | tuple):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply ``"a.b.c=value"`` to nested plain data in place; ``value`` is parsed as YAML (``3e-4``, ``[64, 64]``).

    Raises:
        ConfigError: The override has no ``=`` or an empty key.
    """
    key, sep, raw = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{override}' must look like key.subkey=value")
    try:
        value = yamlfile.loads(raw, f"override '{override}': the value") if raw.strip() else ""
    except yamlfile.YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    node = data
    parts = key.strip().split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if isinstance(child, list):  # a list of named records: the rest of the key names an entry and its keys
            update: Any = value
            for name in reversed(parts[i + 1 :]):
                update = {name: update}
            node[part] = update_named(child, update, ".".join(parts[: i + 1]))
            return
        if not isinstance(child, dict):
            raise ConfigError(f"override '{override}': '{'.'.join(parts[: i + 1])}' is not a section")
        node = child
    node[parts[-1]] = value


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML mapping strictly (:mod:`policies.runtime.yamlfile`: duplicate keys refused, YAML 1.2 numbers),
    with errors that name the file."""
    try:
        data = yamlfile.load(path, "config file")
    except yamlfile.YamlFileError as exc:
        raise ConfigError(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping at the top level")
    return data


def positive(name: str, value: float) -> None:
    """Refuse ``value`` unless it is finite and > 0 (``name`` is the config key, for the message).

    Raises:
        ValueError: Naming the key and the value (the config loader turns it into a :class:`ConfigError`).
    """
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value}")
