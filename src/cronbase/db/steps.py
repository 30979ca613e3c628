"""Logic that talks to the database in turns (run this statement, then decide on its rows), written
once as a generator of steps, and its two drivers.

The generator is pure: it yields a step (a statement and its parameters, or whatever its caller
knows how to answer) and is sent the answer. :func:`drive` and :func:`drive_async` run it to the
end and are the only I/O, so the sync and async shells of an operation stay a few lines each
(``effects.py`` entering an effect, ``operations/audited.py`` running an operator action).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

S = TypeVar("S")  # a step
T = TypeVar("T")  # what the generator returns


def _resume(resume: Callable[[Any], S], value: Any) -> tuple[bool, Any]:
    """``resume(value)`` (the generator's send or throw): (False, the next step), or (True, what
    the generator returned)."""
    try:
        return False, resume(value)
    except StopIteration as stop:
        return True, stop.value


def drive(
    steps: Generator[S, Any, T],
    run: Callable[[S], Any],
    thrown: tuple[type[BaseException], ...] = (),
) -> T:
    """Run ``steps`` to the end and return what it returns: each step's answer, ``run(step)``,
    is sent back to it; an exception of a ``thrown`` type that ``run`` raises is thrown into it
    instead (it may catch it and go on), any other propagates."""
    done, value = _resume(steps.send, None)
    while not done:
        try:
            answer = run(value)
        except thrown as exc:
            done, value = _resume(steps.throw, exc)
        else:
            done, value = _resume(steps.send, answer)
    return value  # type: ignore[no-any-return]


async def drive_async(
    steps: Generator[S, Any, T],
    run: Callable[[S], Awaitable[Any]],
    thrown: tuple[type[BaseException], ...] = (),
) -> T:
    """The async twin of :func:`drive`: ``run`` is awaited."""
    done, value = _resume(steps.send, None)
    while not done:
        try:
            answer = await run(value)
        except thrown as exc:
            done, value = _resume(steps.throw, exc)
        else:
            done, value = _resume(steps.send, answer)
    return value  # type: ignore[no-any-return]
