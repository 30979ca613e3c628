"""The newsletter's tasks: plain Django tasks (django.tasks), with no import from cronbase. The
backend in settings.TASKS runs them, and OPTIONS gives them retries, a unique window and cron."""

from django.tasks import TaskContext, task
from django.utils import timezone

from .models import Subscriber


@task(queue_name="emails")
def send_welcome(subscriber_id: int) -> str:
    subscriber = Subscriber.objects.get(id=subscriber_id)
    subscriber.welcomed_at = timezone.now()
    subscriber.save(update_fields=["welcomed_at"])
    return f"welcomed {subscriber.email}"


class CrmUnavailable(ConnectionError):
    pass


@task(takes_context=True, priority=10)
def sync_to_crm(context: TaskContext, subscriber_id: int, failures: int = 0) -> dict[str, int]:
    # The CRM fails the first `failures` attempts: retried (OPTIONS), each error kept.
    if context.attempt <= failures:
        raise CrmUnavailable(f"CRM unreachable (attempt {context.attempt})")
    Subscriber.objects.filter(id=subscriber_id).update(crm_synced_at=timezone.now())
    return {"subscriber_id": subscriber_id, "attempt": context.attempt}


@task
def send_digest(subscriber_id: int) -> str:
    # Enqueued with .using(run_after=...): waits until then.
    return f"digest for {Subscriber.objects.get(id=subscriber_id).email}"


@task
async def count_subscribers() -> int:
    return await Subscriber.objects.acount()


@task
def purge_unconfirmed() -> int:
    # Every night at 03:00 Berlin time (OPTIONS: cron).
    cutoff = timezone.now() - timezone.timedelta(days=30)
    deleted, _ = Subscriber.objects.filter(welcomed_at=None, created_at__lt=cutoff).delete()
    return deleted
