"""Statements you can read: every statement cronbase sends, as PostgreSQL receives it, after its
fragments are put in place and its variants rendered (``db/queries.py``). ``cronbase sql``
prints them for a schema; ``docs/statements.sql`` holds them for the schema ``cronbase``,
checked in and kept current by a test, so a change to a fragment shows in review as the change
to every statement that includes it.

``python -m cronbase.operations.statements --write docs/statements.sql`` writes the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..db.queries import Queries

HEADER = """\
-- Every statement cronbase sends, for the schema "cronbase", as PostgreSQL receives it: fragments
-- put in place, variants rendered (src/cronbase/db/queries.py). The sources, with their comments,
-- are src/cronbase/db/sql/*.sql; this file is made from them:
--   python -m cronbase.operations.statements --write docs/statements.sql
-- and tests/unit/test_statements.py fails when it is stale. %(name)s is a parameter.
"""


def rendered(schema: str = "cronbase", names: list[str] | None = None) -> dict[str, str]:
    """Each statement's final text for ``schema``, by name (sorted); ``names`` picks some, and an
    unknown name is a KeyError naming the known ones."""
    queries = Queries.for_schema(schema)
    known = sorted(queries.templates)
    chosen = names or known
    unknown = [n for n in chosen if n not in queries.templates]
    if unknown:
        raise KeyError(f"no statement {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
    return {name: getattr(queries, name).decode() for name in chosen}


def as_file(schema: str = "cronbase") -> str:
    """The text of docs/statements.sql: every statement under a ``-- name:`` line."""
    parts = [HEADER]
    for name, text in rendered(schema).items():
        parts.append(f"\n-- name: {name}\n{text};\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cronbase.operations.statements")
    parser.add_argument("--write", metavar="FILE", type=Path, help="write the file here")
    args = parser.parse_args(argv)
    text = as_file()
    if args.write is None:
        sys.stdout.write(text)
    else:
        args.write.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
