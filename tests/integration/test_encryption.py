"""Encrypted tasks (payload/sealing.py, docs/guides/encryption.md): the payload, result and error
messages of an encrypt=True task's jobs are stored sealed, in the live table, the history and the
attempts, as SQL reads them; views open them where the key is configured, and name the key
where it is not; a worker without the key leaves the job waiting, not lost."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import cronbase
from cronbase import Backoff
from cronbase.operations.keys import keys_in_use, rotate
from cronbase.payload.sealing import new_key
from cronbase.records import Encrypted
from tests.browser.conftest import running_dashboard
from tests.conftest import SCHEMA
from tests.e2e.test_cli import cronbase as run_cli
from tests.e2e.test_cli import ok

SECRET = "4111-1111-1111-1111"
# Every column of each table, as one text: what a backup, a replica or a report would hold.
TABLES = ("jobs", "jobs_history", "job_attempts")


@pytest.fixture(autouse=True)
def no_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONBASE_ENCRYPTION_KEYS", raising=False)
    monkeypatch.delenv("CRONBASE_ENCRYPTION_KEYS_FILE", raising=False)


@pytest.fixture
def k1() -> str:
    return new_key()


@pytest.fixture
def apps(database_url: str, db: psycopg.Connection[Any]) -> Iterator[list[cronbase.App]]:
    made: list[cronbase.App] = []
    yield made
    for app in made:
        app.close()


def make_app(apps: list[cronbase.App], database_url: str, **options: Any) -> cronbase.App:
    app = cronbase.App(database_url=database_url, schema=SCHEMA, **options)
    apps.append(app)
    return app


def run_burst(app: cronbase.App) -> None:
    worker = app.worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)
    asyncio.run(worker.run())


def stored_text(db: psycopg.Connection[Any]) -> list[str]:
    return [
        text
        for table in TABLES
        for (text,) in db.execute(f"SELECT t::text FROM {SCHEMA}.{table} t").fetchall()
    ]


def test_an_encrypted_task_stores_no_argument_result_or_error_in_plain(
    apps: list[cronbase.App], database_url: str, db: psycopg.Connection[Any], k1: str
) -> None:
    app = make_app(apps, database_url, encryption_keys=f"k1={k1}")
    tries: list[str] = []

    @app.task(encrypt=True, retry=Backoff(base=0.001, jitter=0))
    def charge(card: str, note: str) -> dict[str, str]:
        tries.append(card)
        if len(tries) == 1:
            raise ValueError(f"card {card} declined")
        return {"charged": card}

    @app.task(encrypt=True, max_attempts=1)
    def refund(card: str) -> None:
        raise RuntimeError(f"refused {card}")

    @app.task
    def plain(card: str) -> str:
        return card

    charged = charge.defer(card=SECRET, note="first")
    refused = refund.defer(card=SECRET)
    run_burst(app)
    db.execute(f"UPDATE {SCHEMA}.jobs SET run_at = now()")  # the retry, if not run yet
    run_burst(app)
    assert tries == [SECRET, SECRET]

    # From SQL: the secret nowhere in the encrypted tasks' rows; each names its key.
    texts = stored_text(db)
    assert texts
    assert not [t for t in texts if SECRET in t or "declined" in t or "refused" in t]
    keys = db.execute(
        f"SELECT id, status, payload->'$sealed'->>'k', result->'$sealed'->>'k', "
        f"left(last_error, 11), error_type FROM {SCHEMA}.jobs_all ORDER BY id"
    ).fetchall()
    assert keys == [
        (charged, "succeeded", "k1", "k1", "$sealed:k1:", "ValueError"),
        (refused, "dead", "k1", None, "$sealed:k1:", "RuntimeError"),
    ]
    attempts = db.execute(
        f"SELECT job_id, outcome, left(error, 11), left(traceback, 11), error_type "
        f"FROM {SCHEMA}.job_attempts ORDER BY id"
    ).fetchall()
    assert attempts == [
        (charged, "failed", "$sealed:k1:", "$sealed:k1:", "ValueError"),
        (refused, "dead", "$sealed:k1:", "$sealed:k1:", "RuntimeError"),
    ]

    # A task without encrypt stays plain beside them.
    plain_id = plain.defer(card=SECRET)
    row = db.execute(f"SELECT payload FROM {SCHEMA}.jobs WHERE id = %s", [plain_id]).fetchone()
    assert row == ({"card": SECRET},)

    # Views of a process with the key read them opened, and say they were sealed.
    job = app.jobs.get(charged)
    assert (job.payload, job.result, job.encrypted_with) == (
        {"card": SECRET, "note": "first"},
        {"charged": SECRET},
        "k1",
    )
    failed = app.jobs.attempts(charged)[0]
    assert failed.error == f"ValueError: card {SECRET} declined"
    assert failed.traceback is not None
    assert "declined" in failed.traceback
    dead = app.jobs.get(refused)
    assert dead.last_error == f"RuntimeError: refused {SECRET}"
    assert app.jobs.get(plain_id).encrypted_with is None
    (group,) = app.jobs.error_groups("dead").groups
    assert (group.task, group.error_type, group.message) == (
        "refund",
        "RuntimeError",
        "(encrypted with key k1)",
    )

    # A process without it sees that they are sealed, by which key, and nothing else.
    blind = make_app(apps, database_url)
    job = blind.jobs.get(charged)
    assert isinstance(job.payload, Encrypted)
    assert job.payload.key_id == "k1"
    assert isinstance(job.result, Encrypted)
    assert job.encrypted_with == "k1"
    assert SECRET not in str(job.to_json())
    dead = blind.jobs.get(refused)
    assert dead.last_error is not None
    assert "'k1'" in dead.last_error
    assert SECRET not in dead.last_error


def test_a_worker_without_the_key_leaves_the_job_waiting_not_lost(
    apps: list[cronbase.App], database_url: str, db: psycopg.Connection[Any], k1: str
) -> None:
    ran: list[str] = []

    def register(app: cronbase.App, *, encrypt: bool = True) -> Any:
        @app.task(encrypt=encrypt)
        def send(to: str) -> None:
            ran.append(to)

        return send

    producer = make_app(apps, database_url, encryption_keys=f"k1={k1}")
    job_id = register(producer).defer(to="ana@example.com")

    # A worker of an encrypted task without keys does not start: it could not seal.
    keyless = make_app(apps, database_url)
    register(keyless)
    with pytest.raises(cronbase.ConfigurationError, match="task 'send' is encrypted"):
        run_burst(keyless)

    # Workers that claim the job and cannot open it: no keys (its task not marked encrypted
    # there), another key under k1, k1's key under another id.
    for keys in (None, f"k1={new_key()}", f"k2={k1}"):
        options = {} if keys is None else {"encryption_keys": keys}
        worker_app = make_app(apps, database_url, **options)
        register(worker_app, encrypt=keys is not None)
        run_burst(worker_app)
        row = db.execute(
            f"SELECT status, attempts, snoozes, run_at > now() FROM {SCHEMA}.jobs WHERE id = %s",
            [job_id],
        ).fetchone()
        assert row == ("queued", 0, 0, True), keys  # waits, its attempt not counted
        error = db.execute(
            f"SELECT outcome, error FROM {SCHEMA}.job_attempts WHERE job_id = %s "
            "ORDER BY id DESC LIMIT 1",
            [job_id],
        ).fetchone()
        assert error is not None
        assert error[0] == "snoozed", error
        assert "'k1'" in error[1], error
        assert k1 not in error[1]
    assert ran == []

    # A worker with the key runs it once it is due.
    db.execute(f"UPDATE {SCHEMA}.jobs SET run_at = now() WHERE id = %s", [job_id])
    run_burst(producer)
    assert ran == ["ana@example.com"]
    assert producer.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED


def test_sealed_arguments_cannot_be_amended_or_moved_by_other_sql(
    apps: list[cronbase.App], database_url: str, db: psycopg.Connection[Any], k1: str
) -> None:
    app = make_app(apps, database_url, encryption_keys=f"k1={k1}")
    ran: list[tuple[str, str]] = []

    @app.task(encrypt=True)
    def reset_password(email: str, token: str) -> None:
        ran.append((email, token))

    @app.task(encrypt=True)
    def audit(email: str, token: str) -> None:
        ran.append(("audit", email))

    job_id = reset_password.defer(email="ana@example.com", token="t-1")
    (envelope,) = db.execute(
        f"SELECT payload FROM {SCHEMA}.jobs WHERE id = %s", [job_id]
    ).fetchone()
    # Replayed by other SQL with an address of its own beside it, and into another task.
    db.execute(f"DELETE FROM {SCHEMA}.jobs WHERE id = %s", [job_id])
    amended = db.execute(
        "SELECT cronbase.defer('reset_password', %s::jsonb || '{\"email\": \"evil@x\"}')",
        [json.dumps(envelope)],
    ).fetchone()[0]
    moved = db.execute(
        "SELECT cronbase.defer('audit', %s::jsonb)", [json.dumps(envelope)]
    ).fetchone()[0]
    run_burst(app)
    assert ran == []
    errors = dict(
        db.execute(
            f"SELECT job_id, error FROM {SCHEMA}.job_attempts WHERE job_id = ANY(%s)",
            [[amended, moved]],
        ).fetchall()
    )
    assert "plain member 'email' beside a sealed payload" in errors[amended]
    assert "sealed for task 'reset_password' is in a job of task 'audit'" in errors[moved]


def test_a_plain_job_of_an_encrypted_task_runs_and_its_result_is_sealed(
    apps: list[cronbase.App], database_url: str, db: psycopg.Connection[Any], k1: str
) -> None:
    app = make_app(apps, database_url, encryption_keys=f"k1={k1}")

    @app.task(encrypt=True)
    def lookup(account: str) -> str:
        return f"owner of {account}"

    job_id = db.execute("SELECT cronbase.defer('lookup', '{\"account\": \"acc-9\"}')").fetchone()[0]
    run_burst(app)
    (result,) = db.execute(
        f"SELECT result->'$sealed'->>'k' FROM {SCHEMA}.jobs_history WHERE id = %s", [job_id]
    ).fetchone()
    assert result == "k1"
    assert app.jobs.get(job_id).result == "owner of acc-9"


def test_app_wide_encryption_and_workflows_pass_sealed_results_on(
    apps: list[cronbase.App], database_url: str, db: psycopg.Connection[Any], k1: str
) -> None:
    app = make_app(apps, database_url, encryption_keys={"k1": k1}, encrypt=True)
    got: list[Any] = []

    @app.task
    def token(user: str) -> str:
        return f"token-for-{user}"

    @app.task(encrypt=False)
    def announce(previous: str) -> None:
        got.append(previous)

    assert token.defaults.encrypt
    assert not announce.defaults.encrypt
    chain = cronbase.chain(token.s(user=SECRET), announce.s())
    chain.defer()
    run_burst(app)
    assert got == [f"token-for-{SECRET}"]
    # The parent's result stays sealed inside the child's stored payload.
    payloads = [p for (p,) in db.execute(f"SELECT payload::text FROM {SCHEMA}.jobs_all")]
    assert len(payloads) == 2
    assert not [p for p in payloads if SECRET in p]


def test_bad_keys_are_one_line_errors_naming_the_key_never_its_bytes(
    database_url: str, k1: str
) -> None:
    cases = {
        "k1": "expected id=key pairs",
        f"k1={k1},k1={k1}": "'k1' given twice",
        "k1=c2hvcnQ": "encryption key 'k1' must be 32 bytes",
        f"bad id={k1}": "invalid encryption key id 'bad id'",
        "k1=***": "'k1' is not URL-safe base64",
    }
    for given, message in cases.items():
        with pytest.raises(cronbase.ConfigurationError, match=message) as info:
            cronbase.App(database_url=database_url, encryption_keys=given)
        assert k1 not in str(info.value)
        assert "\n" not in str(info.value)

    app = cronbase.App(database_url=database_url, schema=SCHEMA)
    try:

        @app.task(encrypt=True)
        def secret(x: int) -> None:
            pass

        with pytest.raises(cronbase.ConfigurationError, match="task 'secret' is encrypted"):
            secret.defer(x=1)
    finally:
        app.close()


def test_rotation_while_a_worker_drains_then_the_old_key_goes(
    apps: list[cronbase.App], database_url: str, db: psycopg.Connection[Any], k1: str
) -> None:
    k2 = new_key()
    seen: list[int] = []

    def register(app: cronbase.App) -> Any:
        @app.task(encrypt=True, retry=Backoff(base=0.001, jitter=0))
        def work(n: int, card: str) -> dict[str, Any]:
            seen.append(n)
            if n % 10 == 0 and seen.count(n) == 1:
                raise ValueError(f"first try of {n} with {card}")
            return {"n": n, "card": card}

        return work

    old = make_app(apps, database_url, encryption_keys=f"k1={k1}")
    work = register(old)
    for n in range(60):
        work.defer(n=n, card=SECRET)
    run_burst(old)  # finished jobs (and failed attempts) sealed with k1
    for n in range(60, 200):
        work.defer(n=n, card=SECRET)  # live ones, sealed with k1
    assert set(keys_in_use(old.db)) == {"k1"}

    # k2 becomes the primary; k1 stays to open what it sealed. A worker drains the live jobs
    # (sealing results and errors with k2) while the rotation re-seals everything.
    new = make_app(apps, database_url, encryption_keys=f"k2={k2},k1={k1}")
    register(new)
    drain = threading.Thread(target=run_burst, args=(new,))
    drain.start()
    try:
        lines: list[str] = []
        first = rotate(new.db, batch=16, progress=lines.append)
        assert lines
        assert first.primary == "k2"
        assert sum(first.rewritten.values()) > 0
    finally:
        drain.join(timeout=120)
    assert not drain.is_alive()
    db.execute(f"UPDATE {SCHEMA}.jobs SET run_at = now()")
    run_burst(new)  # retries the drain left for later
    done = rotate(new.db, batch=16)  # what the first passed over while the worker ran
    assert (done.passed_over, done.still_needed, done.droppable) == (0, [], ["k1"])
    assert set(keys_in_use(new.db)) == {"k2"}
    # Every stored value names k2, checked with SQL on its own.
    left = db.execute(
        f"SELECT count(*) FROM {SCHEMA}.jobs_all WHERE payload::text LIKE '%%\"k1\"%%' "
        f"OR result::text LIKE '%%\"k1\"%%' OR last_error LIKE '$sealed:k1:%%'"
    ).fetchone()
    assert left == (0,)
    assert db.execute(
        f"SELECT count(*) FROM {SCHEMA}.job_attempts WHERE error LIKE '$sealed:k1:%%' "
        "OR traceback LIKE '$sealed:k1:%%'"
    ).fetchone() == (0,)

    # k1 removed: every job, finished or not, and every attempt still reads.
    only_k2 = make_app(apps, database_url, encryption_keys=f"k2={k2}")
    jobs = only_k2.jobs.list(limit=1000)
    assert len(jobs) == 200
    assert {j.status for j in jobs} == {cronbase.JobStatus.SUCCEEDED}
    assert sorted(j.payload["n"] for j in jobs) == list(range(200))  # type: ignore[index]
    assert all(j.result == {"n": j.payload["n"], "card": SECRET} for j in jobs)  # type: ignore[index]
    failed = [a for j in jobs if j.id % 10 == 1 for a in only_k2.jobs.attempts(j.id)]
    errors = [a.error for a in failed if a.outcome == "failed"]
    assert errors
    assert all(e is not None and e.startswith("ValueError: first try") for e in errors)
    assert audit_actions(db) == ["keys.rotate", "keys.rotate"]


def audit_actions(db: psycopg.Connection[Any]) -> list[str]:
    return [a for (a,) in db.execute(f"SELECT action FROM {SCHEMA}.audit_log ORDER BY id")]


def test_the_keys_commands(database_url: str, db: psycopg.Connection[Any], k1: str) -> None:
    made = run_cli(database_url, "keys", "new", "2027-01")
    line = ok(made).strip()
    key_id, _, key = line.partition("=")
    assert key_id == "2027-01"
    assert len(base64.urlsafe_b64decode(key)) == 32
    bad = run_cli(database_url, "keys", "new", "no spaces")
    assert bad.returncode == 2
    assert "'no spaces'" in bad.stderr

    producer = cronbase.App(database_url=database_url, schema=SCHEMA, encryption_keys=f"k1={k1}")
    try:

        @producer.task(encrypt=True)
        def secret(x: str) -> None:
            pass

        job_id = secret.defer(x=SECRET)
    finally:
        producer.close()
    both = {"CRONBASE_ENCRYPTION_KEYS": f"{line},k1={k1}"}
    status = ok(run_cli(database_url, "keys", "status", **both))
    assert status.splitlines() == [
        "2027-01 (primary): no stored value needs it",
        "k1 (old): seals 1 stored values",
    ]
    rotated = ok(run_cli(database_url, "keys", "rotate", "--batch", "5", **both))
    assert "every stored value is sealed with '2027-01'" in rotated
    assert "no stored value needs 'k1': remove it" in rotated
    shown = ok(run_cli(database_url, "jobs", "show", str(job_id), CRONBASE_ENCRYPTION_KEYS=line))
    assert SECRET in shown
    assert "with key '2027-01'" in shown
    blind = ok(run_cli(database_url, "jobs", "show", str(job_id)))
    assert SECRET not in blind
    assert "encrypted with key '2027-01'" in blind
    missing = run_cli(database_url, "keys", "rotate", CRONBASE_ENCRYPTION_KEYS=f"k9={k1}")
    assert missing.returncode == 2
    assert "'2027-01'" in missing.stderr
    assert k1 not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_the_dashboard_opens_an_encrypted_job_with_its_key_and_says_so(
    apps: list[cronbase.App],
    database_url: str,
    db: psycopg.Connection[Any],
    k1: str,
    tmp_path: Path,
) -> None:
    app = make_app(apps, database_url, encryption_keys=f"k1={k1}")

    @app.task(encrypt=True)
    def charge(card: str) -> None:
        pass

    job_id = charge.defer(card=SECRET)
    with running_dashboard(
        database_url, tmp_path / "keyed.log", CRONBASE_ENCRYPTION_KEYS=f"k1={k1}"
    ) as keyed:
        page = httpx.get(f"{keyed.url}/jobs/{job_id}", timeout=30)
    assert page.status_code == 200
    assert SECRET in page.text
    assert "encrypted with key k1" in page.text
    with running_dashboard(database_url, tmp_path / "blind.log") as blind:
        page = httpx.get(f"{blind.url}/jobs/{job_id}", timeout=30)
        listed = httpx.get(f"{blind.url}/jobs", timeout=30)
    assert page.status_code == listed.status_code == 200
    assert SECRET not in page.text
    assert SECRET not in listed.text
    assert "encrypted with key &#39;k1&#39;" in page.text


def test_rotation_can_change_a_sealed_attempt_error_only_for_another_sealed_one(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    (job_id,) = db.execute(f"INSERT INTO {SCHEMA}.jobs (task) VALUES ('t') RETURNING id").fetchone()
    rows = db.execute(
        f"INSERT INTO {SCHEMA}.job_attempts (job_id, attempt, outcome, error, traceback) "
        "VALUES (%s, 1, 'failed', 'plain error', NULL), (%s, 2, 'failed', '$sealed:k1:AAAA', NULL)"
        " RETURNING id",
        [job_id, job_id],
    ).fetchall()
    plain, sealed = (r[0] for r in rows)

    def reseal(attempt: int, old: str, new: str) -> list[Any]:
        return db.execute(
            f"SELECT * FROM {SCHEMA}.reseal_attempts(%s, %s, %s, %s, %s, %s)",
            [[attempt], [job_id], [old], [new], [None], [None]],
        ).fetchall()

    assert reseal(plain, "plain error", "$sealed:k2:BBBB") == []  # plain stays as written
    assert reseal(sealed, "$sealed:k1:AAAA", "rewritten") == []  # no plain text for a seal
    assert reseal(sealed, "$sealed:k1:stale", "$sealed:k2:BBBB") == []  # changed since read
    assert reseal(sealed, "$sealed:k1:AAAA", "$sealed:k2:BBBB") == [(sealed,)]
    errors = db.execute(
        f"SELECT error FROM {SCHEMA}.job_attempts WHERE job_id = %s ORDER BY attempt", [job_id]
    ).fetchall()
    assert errors == [("plain error",), ("$sealed:k2:BBBB",)]
