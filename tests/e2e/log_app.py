"""An app whose handlers log with the standard library (tests/e2e/test_log_context.py)."""

import logging
import os

import cronbase

app = cronbase.App(schema=os.environ.get("CRONBASE_SCHEMA", "cronbase"))
log = logging.getLogger("shop.invoices")


@app.task
def send_invoice(invoice_id: int) -> None:
    log.info("sending invoice %d", invoice_id)


@app.task(max_attempts=1)
async def refund(order_id: int) -> None:
    log.warning("refunding order %d", order_id)
    raise RuntimeError(f"refund {order_id} declined")
