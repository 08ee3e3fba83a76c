"""Views of query rows, as the coverage page and ``reprocess status`` show them: frozen dataclasses
built from a row by field name (:func:`from_row`), and their JSON from the fields alone
(:meth:`View.as_dict`).

A view's fields are declared once, in the order its JSON lists them. A field whose column needs
converting, or whose JSON key or value differs from the field, says so in its metadata
(``field(metadata=column(...))``); a
value the view computes from its other fields is a ``field(init=False)`` set in ``__post_init__``.

Examples
--------
>>> from dataclasses import dataclass, field
>>> @dataclass(frozen=True, slots=True, kw_only=True)
... class Cell(View):
...     topic: str
...     offsets: tuple[int, ...] = field(metadata=column(read=tuple, key="committed"))
>>> class Row:  # a query row's columns, by name
...     _mapping = {"topic": "t", "offsets": [0, 5]}
>>> cell = from_row(Cell, Row())
>>> cell
Cell(topic='t', offsets=(0, 5))
>>> cell.as_dict()
{'topic': 't', 'committed': [0, 5]}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, fields
from datetime import datetime
from typing import Any, ClassVar, TypeVar

V = TypeVar("V", bound="View")


def column(
    *, read: Callable[[Any], Any] | None = None, key: str | None = None, show: Callable[[Any], Any] | None = None
) -> dict[str, Any]:
    """A view field's metadata: it is read from the row's column of its name through ``read``, and
    shown in the JSON under ``key`` (default: its name) as ``show(value)`` (default: :func:`jsonable`)."""
    return {"read": read, "key": key, "show": show}


class View:
    """A view dataclass's JSON: every field in order, under its ``key``, through its ``show``."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            show = f.metadata.get("show") or jsonable
            out[f.metadata.get("key") or f.name] = show(getattr(self, f.name))
        return out


def from_row(view: type[V], row: Any, **given: Any) -> V:
    """The ``view`` of a query row: each field the view takes is the row's column of the same name,
    through the field's ``read``, unless ``given`` holds it."""
    columns = row._mapping
    values = {}
    for f in fields(view):
        if f.name in given:
            values[f.name] = given[f.name]
        elif f.init:
            read = f.metadata.get("read")
            values[f.name] = read(columns[f.name]) if read else columns[f.name]
    return view(**values)


def jsonable(value: Any) -> Any:
    """Datetimes in ISO 8601 and tuples as lists (nested ones too); other values as they are."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    return value
