"""``--payload`` from a file (``@payload.json``) or stdin (``-``), for a payload too long for a
command line (Linux refuses one argument over 128 KiB), in every command that takes one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.test_cli import APP, CRONBASE, REPO, cli_env, cronbase, job_rows, ok

BIG = "x" * 200_000  # over MAX_ARG_STRLEN (131,072 bytes): no shell could pass it inline


def test_enqueue_reads_a_payload_over_128_kb_from_a_file(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    source = tmp_path / "payload.json"
    source.write_text(json.dumps({"message": BIG}), encoding="utf-8")
    job_id = int(
        ok(cronbase(database_url, "--app", APP, "enqueue", "explode", "--payload", f"@{source}"))
    )
    stored = db.execute(
        "SELECT task, payload->>'message' = %s FROM cronbase.jobs_all WHERE id = %s", [BIG, job_id]
    ).fetchone()
    assert stored == ("explode", True)


def test_enqueue_reads_a_payload_from_stdin(database_url: str, db: psycopg.Connection[Any]) -> None:
    result = subprocess.run(
        [str(CRONBASE), "--app", APP, "enqueue", "explode", "--payload", "-"],
        input=json.dumps({"message": BIG}),
        env=cli_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    job_id = int(ok(result))
    stored = db.execute(
        "SELECT length(payload->>'message') FROM cronbase.jobs_all WHERE id = %s", [job_id]
    ).fetchone()
    assert stored == (len(BIG),)


def test_schedules_add_reads_its_payload_from_a_file(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    source = tmp_path / "payload.json"
    source.write_text('{"n": 12345}', encoding="utf-8")
    ok(
        cronbase(
            database_url,
            *("--app", APP, "schedules", "add", "record", "--cron", "@daily"),
            *("--payload", f"@{source}", "--key", "daily"),
        )
    )
    assert db.execute("SELECT key, payload FROM cronbase.schedules").fetchall() == [
        ("daily", {"n": 12345})
    ]


@pytest.mark.parametrize(
    ("content", "given", "said"),
    [
        (
            None,
            "@{tmp}/missing.json",
            "cannot read '@{tmp}/missing.json': No such file or directory",
        ),
        (None, "@{tmp}", "cannot read '@{tmp}': Is a directory"),
        (None, "@", "'@' needs a file name: --payload @payload.json"),
        ('{"n": 1', "@{tmp}/p.json", "file '{tmp}/p.json' is not valid JSON: Expecting"),
        ("[1, 2]", "@{tmp}/p.json", "file '{tmp}/p.json' is an array; it must be a JSON object"),
        (b"\xff{}", "@{tmp}/p.json", "file '{tmp}/p.json' is not UTF-8 text: invalid start byte"),
        ('{"n": "7"}', "@{tmp}/p.json", "payload['n'] is '7', not an int"),
    ],
)
@pytest.mark.parametrize("command", ["enqueue", "schedules add"])
def test_a_payload_file_that_does_not_do_is_one_error_line_and_writes_nothing(
    database_url: str,
    db: psycopg.Connection[Any],
    tmp_path: Path,
    content: str | bytes | None,
    given: str,
    said: str,
    command: str,
) -> None:
    if isinstance(content, bytes):
        (tmp_path / "p.json").write_bytes(content)
    elif content is not None:
        (tmp_path / "p.json").write_text(content, encoding="utf-8")
    args = ["enqueue", "record"] if command == "enqueue" else ["schedules", "add", "record"]
    if command != "enqueue":
        args += ["--cron", "@daily"]
    result = cronbase(database_url, "--app", APP, *args, "--payload", given.format(tmp=tmp_path))
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert said.format(tmp=tmp_path) in line, line
    assert job_rows(db) == []
    assert db.execute("SELECT count(*) FROM cronbase.schedules").fetchone() == (0,)


def test_stdin_that_is_not_an_object_is_named_as_stdin(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = subprocess.run(
        [str(CRONBASE), "--app", APP, "enqueue", "record", "--payload", "-"],
        input="null",
        env=cli_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "error: Invalid value for '--payload': stdin is null; it must be a JSON object of the "
        """task's arguments, e.g. '{"invoice_id": 812}'""",
    )
    assert job_rows(db) == []
