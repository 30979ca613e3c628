"""The shop's outside world, faked so that the example runs anywhere: a payment gateway that
times out under load, a mail server that greylists, and the mailbox it delivers to."""

from collections import Counter

mailbox: list[str] = []
tries: Counter[str] = Counter()  # calls per charge and per message, to see the retries


class GatewayTimeout(Exception):
    pass


class PaymentDeclined(Exception):
    pass


class MailServerBusy(Exception):
    pass


def order_cents(order_id: int) -> int:
    return 1000 + 250 * order_id


def charge(order_id: int, cents: int) -> str:
    """Declines nothing above zero, but times out twice for each order before it answers."""
    if cents <= 0:
        raise PaymentDeclined(f"order {order_id}: cannot charge {cents} cents")
    tries[f"charge {order_id}"] += 1
    if tries[f"charge {order_id}"] <= 2:
        raise GatewayTimeout(f"no answer charging order {order_id}")
    return f"ch_{order_id}"


def send_mail(to: str, subject: str) -> None:
    """Refuses each message the first time (greylisting), as many mail servers do."""
    tries[f"mail {to}"] += 1
    if tries[f"mail {to}"] == 1:
        raise MailServerBusy(f"451 greylisted, try again later ({to})")
    mailbox.append(f"{to}: {subject}")
