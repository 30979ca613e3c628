"""Task.arguments and check_payload answer as inspect.Signature.bind would, fast path or not."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cronbase
from cronbase.errors import PayloadError


def plain(a: int, b: int = 2) -> None: ...
def keyword_only(a: int, *, c: int, d: int = 4) -> None: ...
def var_keyword(a: int, **rest: Any) -> None: ...
def positional_only(a: int, /, b: int = 2) -> None: ...
def var_positional(*args: int, b: int = 2) -> None: ...
def nothing() -> None: ...


HANDLERS = [plain, keyword_only, var_keyword, positional_only, var_positional, nothing]
NAMES = ["a", "b", "c", "d", "e", "args", "rest"]


def binds(func: Callable[..., None], payload: dict[str, Any]) -> bool:
    try:
        inspect.signature(func).bind(**payload)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("func", HANDLERS, ids=lambda f: f.__name__)
@given(keys=st.sets(st.sampled_from(NAMES)))
def test_a_payload_is_accepted_exactly_when_bind_accepts_it(
    func: Callable[..., None], keys: set[str]
) -> None:
    app = cronbase.App(database_url="postgresql://nobody@127.0.0.1:1/never")  # never connects
    task = app.task(func)
    payload = dict.fromkeys(sorted(keys), 1)
    if binds(func, payload):
        assert task.arguments(payload) == payload
        task.check_payload(payload)
    else:
        with pytest.raises(PayloadError, match=f"task '{func.__name__}'"):
            task.arguments(payload)
        with pytest.raises(PayloadError):
            task.check_payload(payload)
