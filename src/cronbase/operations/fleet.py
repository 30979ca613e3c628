"""The workers an operator sees (``cronbase workers``, the dashboard's /workers): who is alive,
where, run by which supervisor, how busy, serving what, what they did, and which jobs are in
their hands; and the operator's prune of the rows of workers gone for long."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..errors import InvalidValueError
from ..records import Record
from .audited import Action, perform
from .stats import LIVE_WITHIN

if TYPE_CHECKING:
    from ..db.database import Database

# Jobs in a worker's hands listed per worker (busy counts all of them).
JOBS_SHOWN = 20


@dataclass(frozen=True)
class Overrun:
    """A handler running past its timeout: cancelled, not yet returned (it keeps its slot)."""

    job_id: int
    task: str
    attempt: int
    # How long past its timeout, as of now (its worker's last heartbeat, plus the time since).
    seconds_past: float


@dataclass(frozen=True)
class WorkerInfo(Record):
    id: str
    hostname: str
    pid: int
    # The supervisor that runs it (``cronbase worker --processes N``), as host:pid; None for a
    # worker started on its own. Rows come grouped by host and supervisor (worker_overview).
    supervisor: str | None
    # The code it runs: the cronbase package version and the newest migration it knows (None
    # for both: a release before 0016, which did not record them). A rolling deploy is done
    # when every live worker shows the new ones.
    version: str | None
    schema_version: int | None
    # The queues it claims from (None: all) and the tasks it registers (None: older code, any).
    queues: list[str] | None
    concurrency: int
    tasks: list[str] | None
    started_at: datetime
    last_seen_at: datetime
    # Seconds since its last heartbeat, by the database's clock.
    heartbeat_age: float
    # Seen within LIVE_WITHIN: a killed worker's row stays, not alive, until it ages out.
    alive: bool
    # Its running jobs: how many, and the first JOBS_SHOWN of them (id, task), oldest first.
    busy: int
    jobs: list[tuple[int, str]]
    # Handlers it runs past their timeout (named in its log too).
    overruns: list[Overrun] = field(default_factory=list)
    # Since it started, as of its last heartbeat: the jobs it finished successfully and its
    # attempts that failed (to be retried, or dead). None: a release before 0021 (not counted).
    succeeded_jobs: int | None = None
    failed_attempts: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WorkerInfo:
        values = {f.name: row[f.name] for f in fields(cls) if f.name not in ("jobs", "overruns")}
        since = row["heartbeat_age"] if row["alive"] else 0.0
        overruns = [
            Overrun(o["job_id"], o["task"], o["attempt"], o["seconds_past"] + since)
            for o in row["overruns"] or []
        ]
        return cls(
            **values,
            jobs=list(zip(row["job_ids"], row["job_tasks"], strict=True)),
            overruns=overruns,
        )

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["jobs"] = [{"id": job_id, "task": task} for job_id, task in self.jobs]
        out["overruns"] = [asdict(o) for o in self.overruns]
        return out


def group_key(worker: WorkerInfo) -> tuple[str, str | None]:
    """What the front ends group workers by: the host, and the supervisor that runs them (None:
    those started on their own)."""
    return worker.hostname, worker.supervisor


def _params() -> dict[str, Any]:
    return {"live_within": LIVE_WITHIN, "jobs_shown": JOBS_SHOWN}


def workers(db: Database) -> list[WorkerInfo]:
    """Every registered worker, grouped by host and supervisor, groups with a live worker first
    and, in each, the live ones first."""
    return [WorkerInfo.from_row(r) for r in db.fetch_all(db.queries.worker_overview, _params())]


async def workers_async(db: Database) -> list[WorkerInfo]:
    rows = await db.fetch_all_async(db.queries.worker_overview, _params())
    return [WorkerInfo.from_row(r) for r in rows]


def prune_workers(db: Database, older_than: timedelta, *, actor: str | None = None) -> list[str]:
    """Delete the rows of workers not seen for ``older_than`` (never one seen within LIVE_WITHIN:
    alive) that hold no running job; the ids deleted. Audited (``workers.prune``), as
    ``cronbase workers prune`` runs it; retention does the same in the background
    (``Retention(workers=...)``)."""
    if older_than < timedelta(0):
        raise InvalidValueError(f"older_than must not be negative, got {older_than}")
    return perform(db, actor, "workers.prune", "workers", _prune(db, older_than))


def _prune(db: Database, older_than: timedelta) -> Action[list[str]]:
    params = {"older_than": older_than, "live_within": LIVE_WITHIN}
    rows = yield db.queries.delete_gone_workers, params
    ids = sorted(str(r["id"]) for r in rows)
    return ids, {"older_than": str(older_than), "removed": len(ids), "workers": ids}
