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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..payload.sealing import EncryptionError, Keyring, Kind, SealBroken
from .audited import Action, perform

if TYPE_CHECKING:
    from ..db.database import Database

DEFAULT_BATCH = 500
MAX_BATCH = 10_000
# Passes over the tables while some row was passed over (changed, or locked by a worker).
MAX_PASSES = 5
BROKEN_NAMED = 20
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
    # Rows holding a sealed value that does not open (changed by other SQL, or sealed under
    # the same key id by another key): left as they are, named here (the first BROKEN_NAMED).
    broken: list[str] = field(default_factory=list)

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
    done = Rotation(keys.primary, keys.ids)
    walk = _Walk(db, keys, batch, progress or (lambda line: None), done)
    for number in range(1, MAX_PASSES + 1):
        done.passes, done.passed_over, done.broken = number, 0, []
        walk.jobs("jobs", db.queries.sealed_jobs_batch, db.queries.reseal_jobs)
        walk.jobs("jobs_history", db.queries.sealed_history_batch, db.queries.reseal_history)
        walk.attempts()
        if not done.passed_over:
            break
        walk.say(f"pass {number}: {done.passed_over} rows changed or locked meanwhile: again")
    done.in_use = keys_in_use(db)
    return perform(db, actor, "keys.rotate", f"key:{keys.primary}", _recorded(done))


def _recorded(done: Rotation) -> Action[Rotation]:
    return done, {
        "primary": done.primary,
        "rewritten": done.rewritten,
        "passed_over": done.passed_over,
        "in_use": done.in_use,
        "broken": len(done.broken),
    }
    yield  # an action of no statement: its audit row records the batches run before it


@dataclass
class _Walk:
    """One pass over a table in batches by id: each batch read, re-sealed here, written where
    unchanged; ``done`` counts. A value that does not open (SealBroken) leaves its row as it
    is, named in ``done.broken``; a key that is not configured (KeyMissing) stops the run."""

    db: Database
    keys: Keyring
    batch: int
    say: Progress
    done: Rotation

    def _written(self, table: str, count: int, tried: int) -> None:
        self.done.rewritten[table] = self.done.rewritten.get(table, 0) + count
        self.done.passed_over += tried - count

    def _broken(self, exc: SealBroken) -> None:
        if len(self.done.broken) < BROKEN_NAMED:
            self.done.broken.append(str(exc))

    def jobs(self, table: str, read: bytes, write: bytes) -> None:
        after = 0
        while True:
            params = {"after": after, "primary": self.keys.primary, "limit": self.batch}
            rows = self.db.rows(read, params)
            new: dict[str, list[Any]] = {name: [] for name in _JOB_ARRAYS}
            for job_id, payload, result, error in rows:
                where = f"{table} job {job_id}"
                try:
                    values = (
                        _resealed_json(self.keys, payload, "payload", where),
                        _resealed_json(self.keys, result, "result", where),
                        _resealed_text(self.keys, error, where),
                    )
                except SealBroken as exc:
                    self._broken(exc)
                    continue
                for name, old, value in zip(
                    ("payloads", "results", "errors"), (payload, result, error), values, strict=True
                ):
                    new["old_" + name].append(old)
                    new[name].append(value)
                new["ids"].append(job_id)
            if new["ids"]:
                self._written(table, len(self.db.rows(write, new)), len(new["ids"]))
            if rows:
                after = rows[-1][0]
                self.say(f"{table}: {self.done.rewritten.get(table, 0)} re-sealed (to id {after})")
            if len(rows) < self.batch:
                return

    def attempts(self) -> None:
        table, after = "job_attempts", 0
        while True:
            params = {"after": after, "primary": self.keys.primary, "limit": self.batch}
            rows = self.db.rows(self.db.queries.sealed_attempts_batch, params)
            new: dict[str, list[Any]] = {name: [] for name in _ATTEMPT_ARRAYS}
            for attempt_id, job_id, error, traceback in rows:
                where = f"{table} of job {job_id}"
                try:
                    values = (
                        _resealed_text(self.keys, error, where),
                        _resealed_text(self.keys, traceback, where),
                    )
                except SealBroken as exc:
                    self._broken(exc)
                    continue
                new["ids"].append(attempt_id)
                new["job_ids"].append(job_id)
                new["old_errors"].append(error)
                new["errors"].append(values[0])
                new["old_tracebacks"].append(traceback)
                new["tracebacks"].append(values[1])
            count = 0
            if new["ids"]:
                count = len(self.db.rows(self.db.queries.reseal_attempts, new))
                self._written(table, count, len(new["ids"]))
            if not rows:
                return
            last = rows[-1][1]
            # From the batch's last job on (>=: its other attempts may follow; those re-sealed
            # no longer match); past it when nothing was written, so rows that cannot be
            # written (broken, deleted meanwhile) are not read for ever.
            after = last if count else last + 1
            self.say(f"{table}: {self.done.rewritten.get(table, 0)} re-sealed (to job {last})")
            if len(rows) < self.batch:
                return


_JOB_ARRAYS = ("ids", "old_payloads", "payloads", "old_results", "results", "old_errors", "errors")
_ATTEMPT_ARRAYS = ("ids", "job_ids", "old_errors", "errors", "old_tracebacks", "tracebacks")


def _resealed_json(keys: Keyring, text: str | None, kind: Kind, where: str) -> str | None:
    if text is None:
        return None
    try:
        return keys.resealed_json(text, kind)
    except EncryptionError as exc:
        raise type(exc)(f"{where}: {exc}", exc.key_id) from None


def _resealed_text(keys: Keyring, text: str | None, where: str) -> str | None:
    if text is None:
        return None
    try:
        return keys.resealed_text(text)
    except EncryptionError as exc:
        raise type(exc)(f"{where}: {exc}", exc.key_id) from None
