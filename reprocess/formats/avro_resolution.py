"""The reader schema a writer version's records are resolved to, by Avro's schema resolution
(what a Confluent deserializer given the subject's latest version as its reader schema does).

The reader is the subject's latest live version, widened so that nothing a writer version
carries is lost: a reader field the writer has (by name, or by one of the reader field's
``aliases``: a rename) reads the writer's value under the reader's name; a reader field the
writer lacks takes the reader's ``default`` (without a default it is left out, so it reads NULL
for that version rather than failing every record); a writer field the latest version dropped is
kept as the writer has it. Nested records (possibly a union with null) are resolved alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any


def reader_schema(writer: str, latest: str) -> str:
    """The schema (JSON) that ``writer``'s records are read as, given the subject's ``latest``
    version; ``writer`` itself when nothing differs or either is not a record.

    Examples
    --------
    >>> w = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}, {"name": "x", "type": "int"}]}'
    >>> r = ('{"type": "record", "name": "R", "fields": [{"name": "b", "type": "long", "aliases": ["a"]},'
    ...      ' {"name": "c", "type": "string", "default": "n"}, {"name": "d", "type": "int"}]}')
    >>> [f["name"] for f in json.loads(reader_schema(w, r))["fields"]]
    ['b', 'c', 'x']
    """
    if writer == latest:
        return writer
    w, r = json.loads(writer), json.loads(latest)
    if not (_is_record(w) and _is_record(r)):
        return writer
    merged = _record(w, r)
    return writer if merged is None or merged == w else json.dumps(merged)


def _is_record(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "record" and isinstance(node.get("fields"), list)


def _record(w: dict[str, Any], r: dict[str, Any]) -> dict[str, Any] | None:
    """``w`` with ``r``'s fields resolved onto it (its own name kept: Avro matches records by name),
    or None when a reader field left out defines a named type another field may refer to."""
    by_name = {f["name"]: f for f in w["fields"]}
    fields, taken = [], set()
    for f in r["fields"]:
        match = next((by_name[n] for n in [f["name"], *f.get("aliases", [])] if n in by_name), None)
        if match is None:
            if "default" in f:
                fields.append(f)
            elif _defines_names(f["type"]):
                return None
            continue
        taken.add(match["name"])
        inner = _type(match["type"], f["type"])
        if inner is None:
            return None
        fields.append({**f, "type": inner})
    return {**w, "fields": [*fields, *(f for f in w["fields"] if f["name"] not in taken)]}


def _type(w: Any, r: Any) -> Any:
    """The reader's type of a field both have, its inline record (or the record branch of a
    union with null) resolved against the writer's."""
    if _is_record(w) and _is_record(r):
        return _record(w, r)
    if isinstance(w, list) and isinstance(r, list):
        wr, rr = [t for t in w if _is_record(t)], [t for t in r if _is_record(t)]
        if len(wr) == len(rr) == 1:
            merged = _record(wr[0], rr[0])
            return None if merged is None else [merged if t is rr[0] else t for t in r]
    return r


def _defines_names(node: Any) -> bool:
    if isinstance(node, list):
        return any(_defines_names(t) for t in node)
    if not isinstance(node, dict):
        return False
    if node.get("type") in ("record", "error", "enum", "fixed"):
        return True
    return any(_defines_names(node[k]) for k in ("type", "items", "values") if k in node)


def same_names(schemas: Iterable[str]) -> Mapping[str, frozenset[str]]:
    """Each field name of the subject's versions and the names any version declares the same
    (a field and its ``aliases``, linked through every version: ``a`` → ``b`` → ``c``), at any
    depth; the spec's name finds its field in every version by them, whichever version is latest.

    Examples
    --------
    >>> v2 = '{"type": "record", "name": "R", "fields": [{"name": "b", "type": "int", "aliases": ["a"]}]}'
    >>> v3 = '{"type": "record", "name": "R", "fields": [{"name": "c", "type": "int", "aliases": ["b"]}]}'
    >>> sorted(same_names([v2, v3])["a"])
    ['b', 'c']
    """
    groups: dict[str, set[str]] = {}
    for schema in schemas:
        for name, aliases in _aliases(json.loads(schema)):
            group = set().union({name, *aliases}, *(groups.get(n, set()) for n in (name, *aliases)))
            for n in group:
                groups[n] = group
    return {n: frozenset(g - {n}) for n, g in groups.items() if len(g) > 1}


def _aliases(node: Any) -> Iterable[tuple[str, list[str]]]:
    """Every field of a schema that declares ``aliases``, nested ones too."""
    if isinstance(node, list):
        for branch in node:
            yield from _aliases(branch)
    elif isinstance(node, dict):
        for f in node.get("fields", []) if isinstance(node.get("fields"), list) else []:
            if f.get("aliases"):
                yield str(f["name"]), [str(a) for a in f["aliases"]]
            yield from _aliases(f.get("type"))
        for inner in ("items", "values", "type"):
            if isinstance(node.get(inner), dict | list):
                yield from _aliases(node[inner])
