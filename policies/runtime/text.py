"""Text that arrives in files is data, never code: the one place that decides what such text may look like and how
it is written where it could be read as code (generated C, Makefiles) or as terminal control (``inspect``).

Two kinds of protection, used together:

- **Validation when a contract loads** (:func:`check_name`, :func:`check_task`, :func:`check_unit`): names of
  tasks, observation terms, signals, joints, actuators, cameras and graph ports are short words of a strict
  character set; units are short phrases of letters, digits, spaces and ``/ ^ ( ) % . -``. A contract holding
  anything else is refused, naming the field, before any file is generated.
- **Escaping where text is written** (:func:`c_comment`, :func:`make_comment`, :func:`printable`): everything that
  is written into generated code passes one of these, also text that was validated, and also text that never passes
  the contract (ONNX node and initializer names). A comment written by :func:`c_comment` cannot end its comment
  (no ``*``), continue a line (no backslash) or start a trigraph (no ``?``); one written by :func:`make_comment`
  cannot end its line (no newline, no backslash) or expand (no ``$``). Terminal text keeps no control character.

Standard library only (the robot runtime imports it).
"""

from __future__ import annotations

import re

MAX_NAME = 128
"""Longest name (term, signal, joint, actuator, camera, graph port), characters."""
MAX_UNIT = 32
"""Longest unit text, characters."""
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")
"""A name: a letter or underscore, then letters, digits and ``_ . : / -`` (ROS joint names, ONNX port names)."""
TASK_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]*")
"""A task name as registered (``quadrotor-hover``): lower-case letters, digits, ``-`` and ``_``."""
UNIT_PATTERN = re.compile(r"[A-Za-z0-9 /^().%+-]*")
"""A unit (``m/s``, ``N m s/rad``, ``kg m^2``, ``(ratio)``): letters, digits, space and ``/ ^ ( ) . % + -``."""
_COMMENT_SAFE = re.compile(r"[^A-Za-z0-9 _.,:;=+()\[\]<>/^%#@!&|~-]")
"""Characters a generated C comment may hold: no ``*`` (ends a comment), backslash (splices lines), ``?``
(trigraphs under ``-std=c99``), quotes or control characters."""
_MAKE_SAFE = re.compile(r"[^A-Za-z0-9 _.,:;=+()\[\]<>/^%@!&|~-]")
"""Characters a Makefile comment may hold: no newline, backslash (continues the comment onto the next line), ``$``
(expansion) or ``#``."""
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters, and the Unicode format characters that reorder or hide text on a terminal."""
MAX_COMMENT = 200
"""Longest text written into one generated comment (longer text is cut, marked ``...``)."""


class TextError(ValueError):
    """Text from a file is not of the form its field allows (the message names the field and the rule)."""


def check_name(value: object, where: str) -> str:
    """``value`` if it is a valid name (:data:`NAME_PATTERN`, at most :data:`MAX_NAME` characters).

    Raises:
        TextError: Naming ``where`` and what a name may hold.
    """
    return _check(value, where, NAME_PATTERN, MAX_NAME, "a name (a letter or _, then letters, digits, _ . : / -)")


def check_task(value: object, where: str = "task") -> str:
    """``value`` if it is a valid task name (:data:`TASK_PATTERN`, at most 64 characters)."""
    return _check(value, where, TASK_PATTERN, 64, "a task name (lower-case letters, digits, - and _)")


def check_unit(value: object, where: str) -> str:
    """``value`` if it is a valid unit text (:data:`UNIT_PATTERN`, at most :data:`MAX_UNIT` characters; may be
    empty)."""
    if value == "":
        return ""
    return _check(value, where, UNIT_PATTERN, MAX_UNIT, "a unit (letters, digits, space and / ^ ( ) . % + -)")


MAX_INSTRUCTION = 256
"""Longest language instruction, characters (one sentence; the sentence encoder reads at most 256 word pieces)."""


def check_instruction(value: object, where: str = "instruction") -> str:
    """``value`` if it is a language instruction: a string of at most :data:`MAX_INSTRUCTION` characters without
    control or text-reordering characters (it may be empty: "no instruction").

    Raises:
        TextError: Naming ``where`` and the rule.
    """
    if not isinstance(value, str):
        raise TextError(f"{where} must be text, got {type(value).__name__}")
    if len(value) > MAX_INSTRUCTION:
        raise TextError(f"{where} is {len(value)} characters long; at most {MAX_INSTRUCTION}")
    if _CONTROL.search(value):
        raise TextError(f"{where} holds control characters: '{printable(value[:60])}'")
    return value


def _check(value: object, where: str, pattern: re.Pattern[str], longest: int, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TextError(f"{where} must be a non-empty string, got {printable(repr(value))}")
    if len(value) > longest or pattern.fullmatch(value) is None:
        shown = printable(value[:60] + ("..." if len(value) > 60 else ""))
        raise TextError(f"{where} must be {what}, at most {longest} characters; got '{shown}'")
    return value


def c_comment(text: object) -> str:
    """``text`` as it may appear inside a generated ``/* ... */`` comment (see the module docstring): characters
    outside a safe set become ``_``, and text longer than :data:`MAX_COMMENT` is cut."""
    return _cut(_COMMENT_SAFE.sub("_", str(text)))


def make_comment(text: object) -> str:
    """``text`` as it may appear on a ``#`` comment line of a generated Makefile (see the module docstring)."""
    return _cut(_MAKE_SAFE.sub("_", str(text)))


def printable(text: object) -> str:
    """``text`` with every control character (terminal escapes, newlines, carriage returns, bells, bidirectional
    overrides) written as a visible ``\\xNN`` / ``\\uNNNN`` escape, for printing text from a file to a terminal or a
    log line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))


def _cut(text: str) -> str:
    return text if len(text) <= MAX_COMMENT else text[: MAX_COMMENT - 3] + "..."
