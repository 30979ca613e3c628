"""Rows as frozen dataclasses: :class:`Record` reads one from a row by field name and writes it as
JSON, so each record class (Job, Schedule, EffectRecord...) only says what it holds."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self


def json_value(value: Any) -> Any:
    """A field's value as JSON holds it: times as ISO 8601, durations in seconds, ids as text."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class Record:
    """A dataclass whose fields are its row's columns of the same names."""

    # Set by @dataclass on each subclass; declared so that fields() takes a Record.
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Self:
        values = {f.name: row[f.name] for f in fields(cls)}
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (see :func:`json_value`)."""
        return {f.name: json_value(getattr(self, f.name)) for f in fields(self)}
