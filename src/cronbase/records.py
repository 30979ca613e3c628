"""Rows as frozen dataclasses: :class:`Record` reads one from a row by field name and writes it as
JSON, so each record class (Job, Schedule, EffectRecord...) only says what it holds; and
:class:`UndecodableJSON`, what a stored JSON column holds when it cannot be read back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self


@dataclass(frozen=True, slots=True)
class UndecodableJSON:
    """A stored JSON value (a payload, a result...) cronbase does not decode: nested deeper than
    ``MAX_JSON_DEPTH``, or a number Python refuses; only other SQL writes one. ``text`` is the
    JSON as stored, ``reason`` why. Views show it marked, by its start; actions work on its row.

    ```pycon
    >>> str(UndecodableJSON('{"x": [[[]]]}', "nested deeper than 2 levels (at character 7)"))
    'undecodable JSON, nested deeper than 2 levels (at character 7): {"x": [[[]]]}'
    ```
    """

    text: str
    reason: str

    SHOWN: ClassVar[int] = 200  # characters of the text a view shows

    def __str__(self) -> str:
        start = self.text[: self.SHOWN] + ("…" if len(self.text) > self.SHOWN else "")
        return f"undecodable JSON, {self.reason}: {start}"

    def to_json(self) -> dict[str, Any]:
        """As ``--json`` outputs write it: the reason, the text's start and its length (the
        whole text can be a megabyte of brackets)."""
        return {
            "undecodable": self.reason,
            "start": self.text[: self.SHOWN],
            "length": len(self.text),
        }


@dataclass(frozen=True, slots=True)
class Encrypted:
    """A value stored encrypted (``@app.task(encrypt=True)``) that this process cannot open: the
    key ``key_id`` is not configured here, or the value does not open with it (``reason``).
    Views show it so, never the ciphertext.

    ```pycon
    >>> str(Encrypted("2026-01", "no key"))
    "encrypted with key '2026-01' (no key)"
    ```
    """

    key_id: str
    reason: str

    def __str__(self) -> str:
        return f"encrypted with key {self.key_id!r} ({self.reason})"

    def to_json(self) -> dict[str, Any]:
        """As ``--json`` outputs write it."""
        return {"encrypted": self.key_id, "reason": self.reason}


def json_value(value: Any) -> Any:
    """A field's value as JSON holds it: times as ISO 8601, durations in seconds, ids as text,
    an undecodable stored value as :meth:`UndecodableJSON.to_json`."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, UndecodableJSON | Encrypted):
        return value.to_json()
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
