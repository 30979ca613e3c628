"""A Django task's call (``args``, ``kwargs``) as a cronbase payload and back.

The payload holds the arguments by the function's own parameter names (``{"subscriber_id": 7}``),
so cronbase's key templates (``unique_key="{subscriber_id}"``, ``concurrency_key``), the admin and
``cronbase.testing.enqueued(app, task=..., subscriber_id=7)`` speak the function's language. How
many were passed by position is kept under ``"__args__"``, so the ``TaskResult`` shows the call as
it was made (``args=[7]`` or ``kwargs={"subscriber_id": 7}``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from . import tasks_api as api

POSITIONAL = "__args__"
# What a schedule's jobs carry besides their arguments (cronbase's scheduler adds it).
SCHEDULED_AT = "scheduled_at"
_P = inspect.Parameter


def signature(func: Callable[..., Any], takes_context: bool) -> inspect.Signature:
    """The parameters a caller passes (the ``context`` of a ``takes_context`` task is not one)."""
    sig = inspect.signature(func)
    if takes_context:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return sig


def to_payload(task: Any, args: Any, kwargs: Any) -> dict[str, Any]:
    """The payload of ``task.enqueue(*args, **kwargs)``: JSON values only (TypeError otherwise,
    as Django's own backends), and arguments that fit the function (TypeError naming it)."""
    args = api.normalize_json(list(args))
    kwargs = api.normalize_json(dict(kwargs))
    sig = signature(task.func, task.takes_context)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{task.module_path}: {exc}") from None
    payload: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is _P.VAR_KEYWORD:
            clash = sorted(set(value) & (set(payload) | {POSITIONAL}))
            if clash:
                raise TypeError(
                    f"{task.module_path}: keyword argument {clash[0]!r} has the name of its "
                    "*args parameter (or cronbase's __args__); rename one"
                )
            payload.update(value)
        else:
            payload[name] = list(value) if kind is _P.VAR_POSITIONAL else value
    if args:
        payload[POSITIONAL] = len(args)
    return payload


def from_payload(
    func: Callable[..., Any], takes_context: bool, payload: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` as they were passed to ``enqueue``. A scheduled job's payload also
    carries its slot's time (``scheduled_at``): passed on only to a function that takes it."""
    rest = dict(payload)
    count = rest.pop(POSITIONAL, 0)
    params = signature(func, takes_context).parameters
    if (
        SCHEDULED_AT in rest
        and SCHEDULED_AT not in params
        and not any(p.kind is _P.VAR_KEYWORD for p in params.values())
    ):
        del rest[SCHEDULED_AT]
    args: list[Any] = []
    if isinstance(count, int) and count > 0:
        for param in params.values():
            if len(args) >= count:
                break
            if param.kind is _P.VAR_POSITIONAL:
                value = rest.pop(param.name, [])
                args.extend(value if isinstance(value, list) else [value])
            elif (
                param.kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD) and param.name in rest
            ):
                args.append(rest.pop(param.name))
            else:
                break
    return args, rest
