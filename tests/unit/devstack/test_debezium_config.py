"""The connector settings devstack writes for Debezium: names PostgreSQL accepts for a slot, tables
matched literally, and no secret in the config (the worker reads it from the state folder)."""

from __future__ import annotations

import pytest

from devstack import debezium, kafka_connect, postgres
from devstack.process import ServiceError


def test_the_config_names_slot_and_publication_after_the_connector_and_holds_no_password():
    config = debezium.connector_config("orders_cdc", ["public.orders"], "shop", **kafka_connect.json_converter(True))
    assert (config["slot.name"], config["publication.name"], config["topic.prefix"]) == ("orders_cdc",) * 2 + ("shop",)
    assert config["table.include.list"] == r"public\.orders", "a regex: the dot must not match any character"
    assert config["database.password"] == f"${{dir:{postgres.pg_dir()}:password}}"
    assert postgres.password() not in str(config)
    assert config["value.converter.schemas.enable"] == "true"


@pytest.mark.parametrize("name", ["Orders", "orders-cdc", "1orders", "x" * 64])
def test_a_name_that_cannot_name_a_replication_slot_is_refused_with_the_rule(name):
    with pytest.raises(ServiceError, match="lower-case letters, digits and '_'"):
        debezium.connector_config(name, ["public.orders"], "shop")
