"""Celery's positional arguments as cronbase's payload, which holds arguments by name.

``add.delay(2, 3)`` stores ``{"x": 2, "y": 3}``: each positional argument is bound to the
handler's parameter of its place (``inspect.signature``). One that cannot be named (too many,
``*args``) is refused before anything is written, with the bind's own words.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import PayloadError, WorkflowError

# What fills the place of the previous result while a chain's signature is bound.
_RECEIVED = object()


def parameters_text(signature: inspect.Signature) -> str:
    return ", ".join(signature.parameters) or "no arguments"


def bind(
    task: str, signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The payload for ``task(*args, **kwargs)``: every argument under its parameter's name."""
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise PayloadError(f"task {task!r}: args must be a list or tuple, got {args!r}")
    if not isinstance(kwargs, Mapping):
        raise PayloadError(f"task {task!r}: kwargs must be a dict, got {kwargs!r}")
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise PayloadError(
            f"arguments do not fit task {task!r} ({parameters_text(signature)}): {exc}"
        ) from None
    return _named(task, signature, bound)


def bind_received(
    task: str, signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[dict[str, Any], str]:
    """A chain's signature: the payload, and the parameter the previous result arrives in (its
    first positional place, before ``args``, as Celery passes it)."""
    try:
        bound = signature.bind(_RECEIVED, *args, **kwargs)
    except TypeError as exc:
        raise WorkflowError(
            f"task {task!r} ({parameters_text(signature)}) cannot take the previous task's "
            f"result as its first argument: {exc}; use .si() for a task that takes none"
        ) from None
    received = next(name for name, value in bound.arguments.items() if value is _RECEIVED)
    if signature.parameters[received].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
        raise WorkflowError(
            f"task {task!r}: the previous result would go to *{received}; cronbase passes it "
            "by name: give the task a first parameter for it, or use .si()"
        )
    del bound.arguments[received]
    return _named(task, signature, bound), received


def _named(
    task: str, signature: inspect.Signature, bound: inspect.BoundArguments
) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise PayloadError(
                    f"task {task!r} takes *{name}: cronbase stores arguments by name, so "
                    f"positional arguments past its parameters ({value!r}) have no name; "
                    "give the handler named parameters"
                )
        elif kind is inspect.Parameter.VAR_KEYWORD:
            payload.update(value)
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            raise PayloadError(
                f"task {task!r}: parameter {name!r} is positional-only; cronbase passes "
                "arguments by name"
            )
        else:
            payload[name] = value
    return payload
