"""The one place inline mode turns a deferred payload into what the worker would hand the handler:
the payload written as JSON, read back, and converted to the handler's arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..payload.encode import encode_payload

if TYPE_CHECKING:
    from ..job import Payload
    from ..task import Task


def through_json(task: Task[Any, Any], payload: Payload) -> tuple[Payload, dict[str, Any]]:
    """``(stored, kwargs)``: the payload as a claimed job carries it (``job.payload``) and the
    handler's keyword arguments; PayloadError as a defer or the worker would raise it.

    The same codec as the database path: the App's ``json_dumps`` (else cronbase's encoder, which
    also writes datetimes, UUIDs, dataclasses...), its ``json_loads``, then ``task.arguments``,
    which converts to the types the handler's annotations ask for.
    """
    db = task.db
    text = encode_payload(task.name, payload, db.max_payload_bytes, db.json_dumps)
    stored: Payload = db.json_loads(text)
    return stored, task.arguments(stored)
