"""The README's promises, run: its opening commands, its Python blocks, its command block.

A fenced block right after a ``<!-- skip -->`` line is not run (fragments, long-running commands).
One right after ``<!-- file: examples/x.py -->`` is an excerpt of that file, which its own tests
run: the excerpt must be in the file, word for word.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from cronbase.schedule.cron import Cron
from tests.e2e.harness import after_inherited

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text("utf-8")
CRONBASE = Path(sys.executable).with_name("cronbase")

_BLOCK = re.compile(
    r"^(<!-- (?:skip|file: (\S+)) -->\n)?```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL
)


def blocks(language: str) -> list[str]:
    """The README's runnable fenced blocks in ``language``, in order."""
    return [
        body for marker, _, lang, body in _BLOCK.findall(README) if lang == language and not marker
    ]


def test_excerpts_are_in_their_files() -> None:
    excerpts = [(path, body) for _, path, _, body in _BLOCK.findall(README) if path]
    assert excerpts, "no <!-- file: ... --> excerpts in the README"
    for path, body in excerpts:
        assert body in (REPO / path).read_text("utf-8"), f"README excerpt not in {path}:\n{body}"


def readme_env(database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CRONBASE_APP")}
    env.update(
        CRONBASE_DATABASE_URL=database_url, PYTHONPATH=after_inherited(str(REPO)), COLUMNS="200"
    )
    return env


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    first_block = _BLOCK.search(README)
    assert first_block is not None
    title, *tagline = README[: first_block.start()].strip().splitlines()
    assert title == "# cronbase"
    assert len(" ".join(tagline)) <= 120, tagline  # one sentence, then the commands
    commands = [line.partition("#")[0].strip() for line in first_block.group(4).splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text("utf-8")
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)
    ci = (REPO / ".ci" / "run").read_text("utf-8")
    runs = [line for line in ci.splitlines() if line.rstrip().endswith(" make test")]
    assert len(runs) == 2, runs  # on the embedded PostgreSQL, then on Debian's PostgreSQL 15


def test_quick_start_block_is_examples_invoices() -> None:
    # The command block imports examples.invoices; it must be what the README shows.
    assert blocks("python")[0] == (REPO / "examples" / "invoices.py").read_text("utf-8")


def test_python_blocks_run(database_url: str, db: psycopg.Connection[Any], tmp_path: Path) -> None:
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks("python")), "utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        env=readme_env(database_url),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    printed = result.stdout.splitlines()
    # What the README's comments say each print shows. The handlers' lines come from the burst
    # worker's threads, in any order and possibly interleaved, so they are only counted.
    assert printed[:2] == ["queued", "queued"]
    assert re.fullmatch(r"no job with id \d+", printed[2])
    assert printed[-2:] == ["succeeded", "queued"]
    handled = [f"sending invoice {n}" for n in (812, 813, 814, 815, 817)] + ["refreshing prices"]
    handled += [
        f"report for sales: {s} (attempt 1)" for s in ("collecting", "rendering", "emailing")
    ]
    assert {line: result.stdout.count(line) for line in handled} == dict.fromkeys(handled, 1)
    assert "sending invoice 818" not in result.stdout  # rolled back with its transaction
    statuses = db.execute(
        "SELECT status, count(*) FROM cronbase.jobs_all GROUP BY status"
    ).fetchall()
    # Still queued: the delayed invoice 816, and the two keyed jobs deferred after the worker ran.
    assert dict(statuses) == {"succeeded": 7, "queued": 3}


def test_command_block_runs(database_url: str, db: psycopg.Connection[Any]) -> None:
    (console,) = blocks("console")
    commands: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    assert commands, "no commands in the README's console block"
    for command, expected in commands:
        args = shlex.split(command)
        assert args[0] == "cronbase"
        result = subprocess.run(
            [str(CRONBASE), *args[1:]],
            env=readme_env(database_url),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        if expected:
            assert result.stdout.splitlines()[-len(expected) :] == expected, command
    assert db.execute("SELECT status FROM cronbase.jobs_all").fetchall() == [("cancelled",)]


def test_crontab_line_runs_as_cron_would(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The README's crontab: its schedule parses, and its command runs under cron's bare env."""
    (crontab,) = blocks("crontab")
    variables = [line for line in crontab.splitlines() if re.match(r"^\w+=", line)]
    jobs = [line for line in crontab.splitlines() if line and line not in variables]
    assert [v.split("=")[0] for v in variables] == ["CRONBASE_DATABASE_URL"]
    assert len(jobs) == 1, jobs
    fields = jobs[0].split(None, 5)
    Cron.parse(" ".join(fields[:5]))
    # $HOME/cronbase is the user's project: here, links to this checkout's venv and examples.
    project = tmp_path / "cronbase"
    project.mkdir()
    (project / ".venv").symlink_to(sys.prefix)
    (project / "examples").symlink_to(REPO / "examples")
    # What cron gives a job: HOME, SHELL, a short PATH, plus the crontab's variable lines.
    env = {
        "HOME": str(tmp_path),
        "SHELL": "/bin/sh",
        "PATH": "/usr/bin:/bin",
        "CRONBASE_DATABASE_URL": database_url,
    }
    result = subprocess.run(
        ["/bin/sh", "-c", fields[5]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    log = (tmp_path / "cronbase-tick.log").read_text()
    assert result.returncode == 0, log
    assert "tick:" in log
    declared = db.execute("SELECT key, task, tz FROM cronbase.schedules").fetchall()
    assert declared == [("nightly-cleanup", "cleanup", "Europe/Berlin")]
