"""The example tests of cronbase.testing (examples/test_inline_mode.py, test_with_database.py)
run as a user runs them, in a pytest subprocess with the plugin from its entry point: they pass,
and deliberately wrong expectations (tests/testing_examples/) fail saying what was found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.harness import after_inherited

REPO = Path(__file__).resolve().parents[2]
# The example App's own database: it must never be used (inline needs none, the fixture swaps).
NOWHERE = "postgresql://examples-must-not-use-this@127.0.0.1:1/none"
APP = "cronbase_app=examples.shop:app"


def run_pytest(*args: str, test_url: str | None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CRONBASE_APP", "CRONBASE_TEST_DATABASE_URL")
    }
    env.update(CRONBASE_DATABASE_URL=NOWHERE, PYTHONPATH=after_inherited(str(REPO)))
    if test_url is not None:
        env["CRONBASE_TEST_DATABASE_URL"] = test_url
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


def leftover_schemas(db: psycopg.Connection[Any]) -> list[str]:
    rows = db.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cronbase\\_test\\_%%'"
    ).fetchall()
    return [name for (name,) in rows]


def test_the_example_tests_pass(database_url: str, db: psycopg.Connection[Any]) -> None:
    result = run_pytest(
        "-o",
        APP,
        "examples/test_inline_mode.py",
        "examples/test_with_database.py",
        test_url=database_url,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout
    assert leftover_schemas(db) == []  # each test's schema was dropped


def test_inline_mode_needs_no_database() -> None:
    result = run_pytest("examples/test_inline_mode.py", test_url=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_wrong_expectations_fail_saying_what_was_found(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = run_pytest(
        "-o", APP, "tests/testing_examples/wrong_expectations.py", test_url=database_url
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "3 failed" in out
    # enqueued: what was asked, and what is there instead.
    assert (
        "AssertionError: expected exactly 1 waiting job of task 'send_receipt' with "
        "{'order_id': 8} in the payload, found 0; enqueued (3 jobs, oldest first):"
    ) in out
    assert (
        "job 1 place_order {'cents': 1250, 'email': 'ada@example.com', 'order_id': 7} [succeeded]"
        in out
    )
    assert "job 3 send_receipt {'email': 'ada@example.com', 'order_id': 7} [queued]" in out
    # drain: each attempt that did not succeed, with its error.
    assert "AssertionError: 1 of 1 drained attempts did not succeed:" in out
    assert (
        "  job 1 charge {'cents': 0, 'order_id': 8} attempt 1: failed (PaymentDeclined: "
        "order 8: cannot charge 0 cents)"
    ) in out
    # inline: the handler's exception, raised from the defer in the test.
    assert "examples.shop.PaymentDeclined: order 9: cannot charge 0 cents" in out
    # Failures point at the test and the handler: cronbase.testing's own frames are hidden.
    assert "src/cronbase/testing/" not in out
    assert leftover_schemas(db) == []


def test_without_the_settings_the_fixtures_fail_in_one_line_naming_them(
    database_url: str,
) -> None:
    no_url = run_pytest("-o", APP, "examples/test_with_database.py", test_url=None)
    assert no_url.returncode == 1, no_url.stdout + no_url.stderr
    assert (
        "\nCRONBASE_TEST_DATABASE_URL is not set: set it to a PostgreSQL URL cronbase's "
        "fixtures may create schemas in (e.g. postgresql://localhost/myapp_test)\n"
    ) in no_url.stdout
    assert "2 errors" in no_url.stdout

    unreachable = run_pytest("-o", APP, "examples/test_with_database.py", test_url=NOWHERE)
    assert unreachable.returncode == 1
    assert (
        "\nCRONBASE_TEST_DATABASE_URL: cannot connect to database "
        "'postgresql://examples-must-not-use-this@127.0.0.1:1/none': "
    ) in unreachable.stdout

    no_app = run_pytest("examples/test_with_database.py", test_url=database_url)
    assert no_app.returncode == 1, no_app.stdout + no_app.stderr
    assert (
        '\nthe cronbase_app fixture needs your App: set `cronbase_app = "myproject.jobs:app"` '
        "under [tool.pytest.ini_options] (or pass -o cronbase_app=...), or override the fixture\n"
    ) in no_app.stdout

    bad_app = run_pytest(
        "-o",
        "cronbase_app=examples.shop:nope",
        "examples/test_with_database.py",
        test_url=database_url,
    )
    assert (
        "\ncronbase_app ini option: cannot import app 'examples.shop:nope': module "
        "'examples.shop' has no attribute 'nope'\n"
    ) in bad_app.stdout
