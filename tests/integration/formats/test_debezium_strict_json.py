"""A Debezium change event with the JSON converter is held to the JSON format's strict rules (issue
41, item 2: the envelope is decoded by the same one parse per record): a key twice at any depth of the
envelope, a lone surrogate escape, text after the envelope, a NUL and malformed JSON are dead letters
naming the reason; a well-formed event beside them lands. Before, ``from_json`` kept the last of a key
written twice, turned a lone surrogate into ``?`` and read the first value of a record alone.

Each value is one record of one topic read by one backfill on the real stack (Apache Kafka, Spark
Connect, PostgreSQL); the expectations are stated here.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.helpers import orders_spec
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import run_and_check

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

TWICE = "malformed JSON: a key appears twice in one object"
NOT_ONE = "malformed JSON: more than one JSON value, or text after the object"
SURROGATE = "malformed JSON: a lone UTF-16 surrogate escape"
MALFORMED = "malformed JSON or not a JSON object"


def _event(case_id: str, after: str, rest: str = "") -> bytes:
    """A create event whose ``after`` holds ``id`` then the JSON text ``after``; ``rest`` follows the
    envelope's last field (verbatim, before its closing brace)."""
    return (
        '{"before":null,"after":{"id":"' + case_id + '"' + after + '},"op":"c","source":{"lsn":1}' + rest + "}"
    ).encode()


def _dead(name: str, value: bytes, error: str) -> Case:
    return Case(name, "debezium json", value, error=error)


CASES = [
    Case("good-event", "debezium json", _event("good-event", ',"t":"x"'), row={"id": "good-event", "t": "x"}),
    _dead("key-twice-in-after", _event("key-twice-in-after", ',"t":"a","t":"b"'), TWICE),
    _dead("key-twice-in-source", _event("key-twice-in-source", ',"t":"a"', ',"source":{"lsn":2}'), TWICE),
    _dead("key-twice-in-unread-field", _event("key-twice-in-unread-field", ',"x":{"y":1,"y":2}'), TWICE),
    _dead("lone-surrogate-in-after", _event("lone-surrogate-in-after", ',"t":"\\ud800"'), SURROGATE),
    _dead("text-after-the-envelope", _event("text-after-the-envelope", ',"t":"a"') + b'{"op":"d"}', NOT_ONE),
    _dead("nul-before-the-envelope", b"\x00" + _event("nul-before-the-envelope", ',"t":"a"'), MALFORMED),
    _dead("unclosed-envelope", _event("unclosed-envelope", ',"t":"a"')[:-1], MALFORMED),
    _dead("single-quoted-string", _event("single-quoted-string", ",\"t\":'a'"), MALFORMED),
]


def test_debezium_json_events_breaking_a_strict_json_rule_are_dead_letters_naming_it(
    kafka_config: dict[str, Any], engine: Any
) -> None:
    name = f"dbz_strict_{uuid.uuid4().hex[:6]}"
    columns = {"id": {"type": "text", "required": True}, "t": "text"}
    spec = orders_spec(name, name, key=["id"], columns=columns, format="debezium", max_dead_letter_ratio=1.0)
    run_and_check(engine, kafka_config, spec, CASES)
