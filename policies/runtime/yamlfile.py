"""Reading YAML from a user's file strictly: one reader for configs, ROS parameter files, robot descriptions and
contract mirrors.

PyYAML's ``safe_load`` follows YAML 1.1, where two things silently differ from what a user meant:

- a key given twice keeps the last value (a typo'd safety setting further down wins without a word). Refused here,
  naming the key and both lines;
- ``1.0e9`` or ``1e-3`` (no sign after the ``e``) is read as *text*. Here numbers follow YAML 1.2 (the core
  schema), as ROS 2's own parameter-file parser reads them: ``1.0e9`` is the float 1e9, ``1e3`` the float 1000.

Nesting deeper than :data:`MAX_DEPTH` and documents larger than :data:`MAX_BYTES` are refused before they can
exhaust memory or the interpreter's recursion. Everything else is ``yaml.SafeLoader``: plain data only, never
objects. ``yaml`` is imported lazily (the robot runtime needs it only to read these files).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MAX_DEPTH = 32
"""Deepest nesting of mappings and lists accepted."""
MAX_BYTES = 16 << 20
"""Largest document accepted, bytes."""
FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"""
)
"""YAML 1.2 core-schema floats (``1.0e9``, ``1e-3``, ``.5``, ``-.inf``); integers stay integers."""
_INT = re.compile(r"^[-+]?[0-9]+$")


class YamlFileError(ValueError):
    """A YAML file cannot be read as plain, unambiguous data (the message names the file and the line)."""


_LOADER: Any = None


def _loader() -> Any:
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader with YAML 1.2 floats, duplicate keys refused and a depth limit."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, list | dict):
                    raise yaml.constructor.ConstructorError(None, None, "a key must be a scalar", key_node.start_mark)
                if key in seen:
                    first = seen[key].line + 1
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key '{key}' is given twice (first on line {first})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if self._depth > MAX_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nesting deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    # YAML 1.2 floats: drop 1.1's float resolver and add the core schema's (integers keep theirs).
    StrictLoader.yaml_implicit_resolvers = {
        k: [(tag, regexp) for tag, regexp in v if tag != "tag:yaml.org,2002:float"]
        for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_12, list("-+0123456789."))

    def construct_float(loader: Any, node: Any) -> Any:
        text = loader.construct_scalar(node)
        if _INT.match(text):  # the 1.2 pattern also matches "12" only through the int resolver; keep ints
            return int(text)
        lowered = text.lower().lstrip("+")
        if lowered in (".inf", "-.inf", ".nan"):
            return {".inf": float("inf"), "-.inf": float("-inf"), ".nan": float("nan")}[lowered]
        return float(text)

    StrictLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    _LOADER = StrictLoader
    return _LOADER


def loads(text: str, where: str) -> Any:
    """Parse ``text`` (from ``where``, named in errors) strictly; see the module docstring.

    Raises:
        YamlFileError: Malformed YAML, a duplicate key, nesting too deep, or a document too large.
    """
    import yaml

    if len(text) > MAX_BYTES:
        raise YamlFileError(f"{where} is larger than {MAX_BYTES >> 20} MiB")
    try:
        return yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{where} is not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise YamlFileError(f"{where} is nested deeper than {MAX_DEPTH} levels") from None


def load(path: str | Path, what: str = "file") -> Any:
    """Read and parse the file ``path`` strictly (``what`` names it in errors: ``parameter file``, ...).

    Raises:
        YamlFileError: The file is missing, unreadable, not UTF-8, or not valid YAML (see :func:`loads`).
    """
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise YamlFileError(f"{what} '{path}' is larger than {MAX_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YamlFileError(f"{what} '{path}' does not exist") from None
    except IsADirectoryError:
        raise YamlFileError(f"{what} '{path}' is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlFileError(f"{what} '{path}' cannot be read: {exc}") from None
    return loads(text, f"{what} '{path}'")
