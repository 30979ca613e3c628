"""examples/payload_types.py: a handler that takes a UUID, an Enum, a list of dataclasses holding
Decimals, an aware datetime and a timedelta; the defer passes them as they are.

Run ``python -m examples.payload_types`` from the repository root (the embedded PostgreSQL
without configuration): it shows a naive datetime refused at defer time, defers one bill, runs a
burst worker, and prints what the handler received.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import cronbase

app = cronbase.App()


class Plan(enum.Enum):
    MONTHLY = "monthly"
    YEARLY = "yearly"


@dataclass
class Line:
    sku: str
    price: Decimal
    quantity: int = 1


@app.task
def send_bill(
    customer: UUID, plan: Plan, lines: list[Line], due: datetime, grace: timedelta
) -> None:
    total = sum(line.price * line.quantity for line in lines)
    # due arrives with its UTC offset, not a zone's name (ISO 8601 has none): print the offset.
    until = (due + grace).isoformat(timespec="minutes")
    print(f"{plan.name} bill of {total} for {customer}, due {until}")


def bill_yearly(customer: UUID, seats: int, due: datetime) -> int:
    return send_bill.defer(
        customer=customer,
        plan=Plan.YEARLY,
        lines=[Line("seat", Decimal("19.90"), seats), Line("support", Decimal("49.00"))],
        due=due,
        grace=timedelta(days=14),
    )


if __name__ == "__main__":
    app.migrate()
    customer = UUID("0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11")
    try:
        bill_yearly(customer, 3, datetime(2026, 3, 1, 9, 0))  # naive: 9:00 in which zone?
    except cronbase.PayloadError as exc:
        print(exc)
    bill_yearly(customer, 3, datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    app.run_worker(burst=True)
    # payload for task 'send_bill' cannot be stored as JSON: payload['due'] is datetime.date...
    # YEARLY bill of 108.70 for 0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11, due 2026-03-15T09:00+00:00
