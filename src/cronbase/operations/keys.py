"""Encryption keys of a database (``cronbase keys``; payload/sealing.py): which keys its stored
values need, and rotation, every sealed value re-sealed with the primary key.

Rotation runs online, beside working workers: batches of a few hundred rows by id, each its own
short transaction, each row written only if it still holds what was read (compare and set); a
live job a worker holds locked is passed over, never waited for. Whatever was passed over (a
job that failed or finished meanwhile, one locked) is read again by the next pass, up to
``MAX_PASSES``. Nothing is kept between runs: a rotation stopped half way is run again, and
rows already under the primary key no longer match its reads. Once :func:`keys_in_use` names
only the primary key, the others can be removed from the configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..payload.sealing import EncryptionError, Keyring, Kind
from .audited import Action, perform

if TYPE_CHECKING:
    from ..db.database import Database

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
# Passes over the tables while some row was passed over (changed, or locked by a worker).
MAX_PASSES = 5
Progress = Callable[[str], None]


@dataclass
class Rotation:
    """What a rotation did: values re-sealed per table, rows passed over in its last pass (0:
    every row it found is under ``primary``), the keys the stored values need after it."""

    primary: str
    configured: tuple[str, ...] = ()
    rewritten: dict[str, int] = field(default_factory=dict)
    passed_over: int = 0
    passes: int = 0
    in_use: dict[str, int] = field(default_factory=dict)

    @property
    def still_needed(self) -> list[str]:
        """Keys other than the primary that stored values still name (none after a rotation
        that passed nothing over, unless a worker sealed with an old primary meanwhile)."""
        return sorted(set(self.in_use) - {self.primary})

    @property
    def droppable(self) -> list[str]:
        """Configured keys no stored value needs: they can be removed from the configuration."""
        return [k for k in self.configured if k != self.primary and k not in self.in_use]


def keys_in_use(db: Database) -> dict[str, int]:
    """Each key id stored values name, and how many values (every job and attempt is read)."""
    return {str(key): int(count) for key, count in db.rows(db.queries.sealing_keys_in_use)}


def required_keys(db: Database) -> Keyring:
    keys = db.keys
    if keys is None:
        raise ConfigurationError(
            "no encryption keys are configured: set CRONBASE_ENCRYPTION_KEYS (the new primary "
            "first, then every key still in use) or App(encryption_keys=...)"
        )
    return keys


def rotate(
    db: Database,
    *,
    batch: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    actor: str | None = None,
) -> Rotation:
    """Re-seal every stored value sealed with another key with the primary key (the first
    configured); audited (``keys.rotate``). EncryptionError naming the key when a value needs a
    key that is not configured: add it after the primary and run again."""
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH:
        raise ConfigurationError(
            f"batch must be a whole number from 1 to {MAX_BATCH}, got {batch!r}"
        )
    keys = required_keys(db)
    say = progress or (lambda line: None)
    done = Rotation(keys.primary, keys.ids)
    for number in range(1, MAX_PASSES + 1):
        done.passes, done.passed_over = number, 0
        for table, walk in (
            ("jobs", _jobs),
            ("jobs_history", _history),
            ("job_attempts", _attempts),
        ):
            written, passed = walk(db, keys, batch, table, say)
            done.rewritten[table] = done.rewritten.get(table, 0) + written
            done.passed_over += passed
        if not done.passed_over:
            break
        say(f"pass {number}: {done.passed_over} rows changed or locked meanwhile: again")
    done.in_use = keys_in_use(db)
    return perform(db, actor, "keys.rotate", f"key:{keys.primary}", _recorded(done))


def _recorded(done: Rotation) -> Action[Rotation]:
    return done, {
        "primary": done.primary,
        "rewritten": done.rewritten,
        "passed_over": done.passed_over,
        "in_use": done.in_use,
    }
    yield  # an action of no statement: its audit row records the batches run before it


def _resealed_json(keys: Keyring, text: str | None, kind: Kind, where: str) -> str | None:
    if text is None:
        return None
    try:
        value = keys.resealed(json.loads(text), kind)
    except EncryptionError as exc:
        raise type(exc)(f"{where}: {exc}", exc.key_id) from None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _resealed_text(keys: Keyring, text: str | None, where: str) -> str | None:
    if text is None:
        return None
    try:
        return keys.resealed_text(text)
    except EncryptionError as exc:
        raise type(exc)(f"{where}: {exc}", exc.key_id) from None


def _jobs(db: Database, keys: Keyring, batch: int, table: str, say: Progress) -> tuple[int, int]:
    return _job_rows(
        db, keys, batch, table, say, db.queries.sealed_jobs_batch, db.queries.reseal_jobs
    )


def _history(db: Database, keys: Keyring, batch: int, table: str, say: Progress) -> tuple[int, int]:
    q = db.queries
    return _job_rows(db, keys, batch, table, say, q.sealed_history_batch, q.reseal_history)


def _job_rows(
    db: Database, keys: Keyring, batch: int, table: str, say: Progress, read: bytes, write: bytes
) -> tuple[int, int]:
    """One pass over jobs or jobs_history by id: (rows re-sealed, rows passed over)."""
    after, written, passed = 0, 0, 0
    while True:
        params = {"after": after, "primary": keys.primary, "limit": batch}
        rows = db.rows(read, params)
        if not rows:
            return written, passed
        new: dict[str, list[Any]] = {name: [] for name in _JOB_ARRAYS}
        for job_id, payload, result, error in rows:
            where = f"{table} job {job_id}"
            new["ids"].append(job_id)
            new["old_payloads"].append(payload)
            new["payloads"].append(_resealed_json(keys, payload, "payload", where))
            new["old_results"].append(result)
            new["results"].append(_resealed_json(keys, result, "result", where))
            new["old_errors"].append(error)
            new["errors"].append(_resealed_text(keys, error, where))
        count = len(db.rows(write, new))
        written += count
        passed += len(rows) - count
        after = rows[-1][0]
        say(f"{table}: {written} re-sealed (to id {after})")
        if len(rows) < batch:
            return written, passed


_JOB_ARRAYS = ("ids", "old_payloads", "payloads", "old_results", "results", "old_errors", "errors")


def _attempts(
    db: Database, keys: Keyring, batch: int, table: str, say: Progress
) -> tuple[int, int]:
    """One pass over job_attempts by job id: (rows re-sealed, rows passed over)."""
    after, written, passed = 0, 0, 0
    while True:
        params = {"after": after, "primary": keys.primary, "limit": batch}
        rows = db.rows(db.queries.sealed_attempts_batch, params)
        if not rows:
            return written, passed
        new: dict[str, list[Any]] = {name: [] for name in _ATTEMPT_ARRAYS}
        for attempt_id, job_id, error, traceback in rows:
            where = f"{table} of job {job_id}"
            new["ids"].append(attempt_id)
            new["job_ids"].append(job_id)
            new["old_errors"].append(error)
            new["errors"].append(_resealed_text(keys, error, where))
            new["old_tracebacks"].append(traceback)
            new["tracebacks"].append(_resealed_text(keys, traceback, where))
        count = len(db.rows(db.queries.reseal_attempts, new))
        written += count
        passed += len(rows) - count
        last = rows[-1][1]
        # From the last batch's last job on (>=: its other attempts may follow); past it when
        # nothing was written, so a batch of rows that cannot be written is not read for ever.
        after = last if count else last + 1
        say(f"{table}: {written} re-sealed (to job {last})")
        if len(rows) < batch:
            return written, passed


_ATTEMPT_ARRAYS = ("ids", "job_ids", "old_errors", "errors", "old_tracebacks", "tracebacks")
