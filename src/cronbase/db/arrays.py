"""The arrays a worker sends on every claim, as PostgreSQL array literals (text) rather than
Python lists.

psycopg adapts a list element by element in Python: a claim carrying ten successes spent ~47 of
the ~52 µs its parameters cost on its ten ids and ten lease tokens, and each registered task name
added ~3 µs more (psycopg 3.3, C implementation; ``dumpcost`` in bench/README.md). The same
arrays as literals cost ~3 µs: a string is sent as it is, and the statement's cast
(``%(done_ids)s::bigint[]``) has PostgreSQL parse it. A statement given a list instead still
works (the inline runner, tests).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from uuid import UUID

from psycopg.adapt import PyFormat, Transformer


def numbers(values: Iterable[int]) -> str:
    """``{1,2,3}``: ints' text needs no quoting."""
    return "{" + ",".join(map(str, values)) + "}"


def uuids(values: Iterable[UUID]) -> str:
    """``{0f5e...,...}``: a UUID's hex digits need no quoting (PostgreSQL reads them without
    the dashes; ``.hex`` is half the cost of ``str()``)."""
    return "{" + ",".join([u.hex for u in values]) + "}"


@functools.lru_cache(maxsize=64)
def _names(values: tuple[str, ...]) -> str:
    # psycopg's own text dump does the quoting (commas, quotes, backslashes, braces, "NULL"),
    # once per set of names: a worker claims with the same names every time.
    dumped = Transformer().get_dumper(list(values), PyFormat.TEXT).dump(list(values))
    assert dumped is not None  # a list is never dumped as NULL
    return bytes(dumped).decode()


def names(values: Sequence[str] | None) -> str | None:
    """Task or queue names as a ``text[]`` literal (None stays NULL: "any")."""
    return None if values is None else _names(tuple(values))
