"""A closed set's values as a trigger form or a command line offers them, read from its enum.

The forms (``enum=``, defaults, the description that says what each value does) and the command
lines (``--start-mode``'s help, ``reprocess reset``'s ``--to-…`` options) take the values from the
enum, so a value is spelled once; a member with no meaning where it is offered fails the DAG's
parse or the command's start, so a new member is never offered undescribed.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

E = TypeVar("E", bound=enum.StrEnum)


def values(kind: type[enum.StrEnum]) -> list[str]:
    """Every value of ``kind``, in its order (a form's ``enum``).

    >>> class Mode(enum.StrEnum):
    ...     MERGE = "merge"
    ...     REBUILD = "rebuild"
    >>> values(Mode)
    ['merge', 'rebuild']
    """
    return [member.value for member in kind]


def listed(kind: type[enum.StrEnum]) -> str:
    """The values as a sentence lists them (a command line's help).

    >>> class End(enum.StrEnum):
    ...     LATEST = "latest"
    ...     OFFSETS = "offsets"
    ...     GROUP = "group"
    >>> listed(End)
    'latest, offsets or group'
    """
    *most, last = values(kind)
    return f"{', '.join(most)} or {last}" if most else last


def described(meanings: Mapping[E, str], separator: str = "; ") -> str:
    """Each value with its meaning, in the enum's order: ``value: meaning``.

    Raises
    ------
    ValueError
        When a member of the enum has no meaning (or ``meanings`` is empty).

    Examples
    --------
    >>> class End(enum.StrEnum):
    ...     LATEST = "latest"
    ...     GROUP = "group"
    >>> described({End.GROUP: "the group's offsets", End.LATEST: "the log end"})
    "latest: the log end; group: the group's offsets"
    >>> described({End.LATEST: "the log end"})
    Traceback (most recent call last):
    ...
    ValueError: End.GROUP has no meaning: say what it does where End is offered
    """
    if not meanings:
        raise ValueError("no meanings given")
    kind = type(next(iter(meanings)))
    missing = [f"{kind.__name__}.{member.name}" for member in kind if member not in meanings]
    if missing:
        raise ValueError(f"{', '.join(missing)} has no meaning: say what it does where {kind.__name__} is offered")
    return separator.join(f"{member.value}: {meanings[member]}" for member in kind)
