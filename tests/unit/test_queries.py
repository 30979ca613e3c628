"""db/queries.py: splitting .sql files into named statements, and rendering them per schema."""

from __future__ import annotations

import re

import pytest

from cronbase.db import queries
from cronbase.db.queries import Queries, load_statements, parse_statements, render

TWO = """-- A file comment before any statement is dropped.

-- name: first_one
-- Its purpose, dropped too.
SELECT 1;

--name:second_one
SELECT a
  -- an inner comment line goes
FROM t -- a trailing comment stays (PostgreSQL ignores it)
WHERE b = %(b)s;
"""


def test_statements_are_split_by_name_without_comment_lines_or_semicolons() -> None:
    assert parse_statements(TWO, "two.sql") == {
        "first_one": "SELECT 1",
        "second_one": "SELECT a\nFROM t -- a trailing comment stays (PostgreSQL ignores it)\n"
        "WHERE b = %(b)s",
    }


def test_a_duplicate_name_is_refused_naming_it_and_the_file() -> None:
    text = "-- name: same\nSELECT 1;\n-- name: same\nSELECT 2;\n"
    with pytest.raises(RuntimeError, match=r"duplicate statement name 'same' in dup\.sql"):
        parse_statements(text, "dup.sql")


def test_an_empty_statement_is_refused_naming_it_and_the_file() -> None:
    text = "-- name: empty\n-- only a comment\n;\n-- name: full\nSELECT 1;\n"
    with pytest.raises(RuntimeError, match=r"statement 'empty' in empty\.sql is empty"):
        parse_statements(text, "empty.sql")


def test_a_file_without_headers_has_no_statements() -> None:
    assert parse_statements("SELECT 1;\n", "none.sql") == {}


def test_every_declared_statement_is_loaded_and_every_loaded_one_declared() -> None:
    declared = {name for name, kind in Queries.__annotations__.items() if kind == "bytes"}
    # What the import loaded (load_statements() over the packaged .sql files) and checked.
    assert set(Queries.templates) == declared
    assert declared >= {"insert_job", "claim_jobs", "finish_jobs", "retry_job", "cancel_job"}


def test_a_mismatch_between_files_and_queries_fails_naming_both_sides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = dict(load_statements())
    del loaded["claim_jobs"]
    loaded["claim_jobz"] = "SELECT 1"
    monkeypatch.setattr(queries, "load_statements", lambda: loaded)
    with pytest.raises(
        RuntimeError, match=r"missing \['claim_jobs'\], undeclared \['claim_jobz'\]"
    ):
        queries._check_names()


def test_render_quotes_the_schema_and_undoubles_sql_braces() -> None:
    template = "SELECT '{{}}'::jsonb FROM {schema}.jobs WHERE id = %(id)s"
    assert (
        render(template, "cronbase")
        == b"SELECT '{}'::jsonb FROM \"cronbase\".jobs WHERE id = %(id)s"
    )
    assert render("SELECT * FROM {schema}.jobs", 'we"ird') == b'SELECT * FROM "we""ird".jobs'


def test_queries_are_rendered_once_per_schema() -> None:
    assert Queries.for_schema("cronbase") is Queries.for_schema("cronbase")
    other = Queries.for_schema("tenant_b")
    assert other is not Queries.for_schema("cronbase")
    assert b'"tenant_b".jobs' in other.claim_jobs
    assert b'"cronbase"' not in other.claim_jobs


# Every % in a statement must be a named parameter or an escaped %%: psycopg reads any other
# one as a placeholder and fails at run time, far from the .sql file.
PERCENT = re.compile(rb"%\(\w+\)[sb]|%%")


@pytest.mark.parametrize("name", sorted(Queries.templates))
def test_every_statement_renders_and_uses_only_named_parameters(name: str) -> None:
    statement: bytes = getattr(Queries.for_schema("cronbase"), name)
    assert b"{schema}" not in statement
    assert b"{{" not in statement
    assert b"%" not in PERCENT.sub(b"", statement), statement.decode()


SHARED = """
-- name: claim
WITH c AS (/* include: lease */) SELECT * FROM c WHERE true /* filtered */;

-- fragment: lease
-- A fragment's comments go, as a statement's.
UPDATE t SET x = 1 RETURNING /* include: columns */

-- fragment: columns
id, name
"""


def test_fragments_are_written_once_and_put_in_place() -> None:
    parsed = parse_statements(SHARED, "shared.sql")
    assert set(parsed) == {"claim", "fragment:lease", "fragment:columns"}
    variants = {"claim_some": ("claim", "/* filtered */", "AND id = ANY (%(ids)s)")}
    assembled = queries.assemble(parsed, variants)
    assert assembled == {
        "claim": "WITH c AS (UPDATE t SET x = 1 RETURNING id, name) SELECT * FROM c WHERE true ",
        "claim_some": "WITH c AS (UPDATE t SET x = 1 RETURNING id, name) SELECT * FROM c "
        "WHERE true AND id = ANY (%(ids)s)",
    }


def test_an_unknown_fragment_or_a_missing_marker_fails_naming_it() -> None:
    parsed = parse_statements("-- name: s\nSELECT /* include: nope */;\n", "bad.sql")
    with pytest.raises(RuntimeError, match=r"statement 's' includes unknown fragment 'nope'"):
        queries.assemble(parsed, {})
    parsed = parse_statements("-- name: s\nSELECT 1;\n", "bad.sql")
    with pytest.raises(RuntimeError, match=r"statement 's' has no marker /\* m \*/ for 'v'"):
        queries.assemble(parsed, {"v": ("s", "/* m */", "x")})


def test_a_fragment_takes_its_arguments_by_name() -> None:
    text = """
-- name: s
WITH gone AS (/* include: batch(table=a_default, age=older_than) */) SELECT 1;

-- fragment: batch
-- $table in a comment is dropped with it.
DELETE FROM $table WHERE finished_at < now() - %($age)s::interval
"""
    parsed = parse_statements(text, "args.sql")
    assert queries.assemble(parsed, {})["s"] == (
        "WITH gone AS (DELETE FROM a_default WHERE finished_at < now() - %(older_than)s::interval)"
        " SELECT 1"
    )
    for include in ("batch(table=a_default)", "batch", "batch(table=a, age=b, more=c)"):
        bad = parse_statements(text.replace("batch(table=a_default, age=older_than)", include), "")
        with pytest.raises(RuntimeError, match=r"fragment 'batch' takes \['age', 'table'\]"):
            queries.assemble(bad, {})


def test_one_claim_statement_serves_every_queue_filter() -> None:
    q = Queries("cronbase")
    plain = q.claim_jobs.decode()
    # The tickets' claim takes the queues as a parameter (NULL: all): no variant to keep in step.
    assert not hasattr(q, "claim_jobs_in_queues")
    assert "claim_tickets(%(worker)s, %(limit)s, %(queues)s::text[], %(tasks)s::text[])" in plain
    fair, fair_in_queues = q.claim_fair_jobs.decode(), q.claim_fair_jobs_in_queues.decode()
    filter_ = "= ANY (%(queues)s::text[])"
    assert filter_ in fair_in_queues
    assert filter_ not in fair
    flow = q.claim_flow_jobs.decode()
    # The lease and the columns returned are one fragment in the flow claim (claim_tickets
    # leases in its migration, with the same assignments).
    lease = "locked_until = now() + j.lease, lease_token = gen_random_uuid()"
    assert lease in flow
    assert "j.metadata::text AS metadata, j.flow_key" in flow
    # A success is written by one fragment, in the claim and alone.
    success = "SELECT done.id, done.task, done.queue, done.payload, 'succeeded',"
    assert [plain.count(success), q.complete_jobs.decode().count(success)] == [1, 1]
    assert success not in q.finish_jobs.decode()


def test_the_reads_of_the_history_and_only_they_run_with_jit_off() -> None:
    q = Queries.for_schema("cronbase")
    for read in ("get_job", "list_jobs", "search_jobs", "job_graph", "queue_overview"):
        assert getattr(q, read) in q.history_reads, read
    for hot in ("claim_jobs", "complete_jobs", "finish_jobs", "insert_job", "heartbeat_jobs"):
        assert getattr(q, hot) not in q.history_reads, hot
