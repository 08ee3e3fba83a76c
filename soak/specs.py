"""The soak's pipelines: the demo's three (pipelines/*.yaml) under names of this soak, on their own
topics and tables, with a one-minute incremental schedule and a frequent reconciliation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

INCREMENTAL: Final = "* * * * *"
RECONCILE: Final = "*/10 * * * *"  # daily in the demo; every ten minutes so a soak sees several


@dataclass(frozen=True)
class Names:
    """Everything one soak names: pipelines (also their topics and target tables), the CDC source
    table's connector and topic."""

    tag: str
    orders: str
    payments: str
    customers: str  # also the CDC source table's name

    @classmethod
    def of(cls, tag: str) -> Names:
        return cls(tag, f"orders_{tag}", f"payments_{tag}", f"customers_{tag}")

    @property
    def pipelines(self) -> tuple[str, str, str]:
        return (self.orders, self.payments, self.customers)

    @property
    def connector(self) -> str:
        return f"reprocess_{self.customers}"

    @property
    def cdc_topic(self) -> str:
        return f"{self.tag}.public.{self.customers}"

    def topic(self, pipeline: str) -> str:
        return self.cdc_topic if pipeline == self.customers else pipeline


def write_specs(folder: Path, names: Names) -> None:
    """The three specs into ``folder`` (the scheduler's pipelines folder for this soak)."""
    folder.mkdir(parents=True, exist_ok=True)
    common = f'schedule: "{INCREMENTAL}"\nreconcile: {{cron: "{RECONCILE}", auto_heal: false}}\nowner: soak\n'
    (folder / f"{names.orders}.yaml").write_text(
        f"name: {names.orders}\ntopics: [{names.orders}]\nconsumer_group: reprocess-{names.orders}\n"
        "key: [order_id]\ncolumns:\n  order_id: {type: text, required: true}\n"
        "  status: {type: text, required: true}\n  amount: {type: numeric}\n  seq: {type: bigint, required: true}\n"
        f"target_table: public.{names.orders}\nordering: offset\ntombstones: delete\n"
        "max_dead_letter_ratio: 0.2\n" + common
    )
    (folder / f"{names.payments}.yaml").write_text(
        f"name: {names.payments}\ntopics: [{names.payments}]\nconsumer_group: reprocess-{names.payments}\n"
        "key: [payment_id]\ncolumns:\n  payment_id: {type: text, required: true}\n"
        "  status: {type: text, required: true}\n  amount: {type: numeric, required: true}\n"
        "  version: {type: bigint, required: true}\n"
        f"target_table: public.{names.payments}\nordering: {{mode: column, column: version}}\n"
        "max_dead_letter_ratio: 0.2\n" + common
    )
    (folder / f"{names.customers}.yaml").write_text(
        f"name: {names.customers}\nformat: debezium\nencoding: json\ntopics: [{names.cdc_topic}]\n"
        f"consumer_group: reprocess-{names.customers}\nkey: [id]\nordering: offset\ncolumns:\n"
        "  id: {type: bigint, required: true}\n  name: {type: text, required: true}\n  balance: numeric\n"
        '  tier: text\n  notes: text\n  tier_label: {type: text, expr: "upper(tier)"}\n'
        f"target_table: public.{names.customers}\n" + common
    )
