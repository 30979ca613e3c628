"""The depth rule for JSON text (payload/stored.py): scanned without recursion, brackets in
strings not counted; what breaks it, or what Python's json cannot read, reads back marked."""

from __future__ import annotations

import json

import pytest

from cronbase import PayloadError, UndecodableJSON
from cronbase.payload.stored import depth_fault, loads_incoming, read_stored


def deep(levels: int, inner: str = "") -> str:
    """An object ``levels`` deep: {"x": [[...inner...]]}."""
    return '{"x": ' + "[" * (levels - 1) + inner + "]" * (levels - 1) + "}"


def test_the_limit_counts_arrays_and_objects_not_brackets_in_strings() -> None:
    assert depth_fault(deep(100)) is None
    assert depth_fault(deep(101)) == 105  # where the 101st level opens
    # Brackets in strings, escaped quotes included, are text: 1,000 of them nest nothing.
    text = deep(100, json.dumps('\\" [{' * 1000))
    assert depth_fault(text) is None
    assert read_stored(text) == json.loads(text)


def test_stored_json_that_breaks_the_rule_or_pythons_json_reads_back_marked() -> None:
    assert read_stored(b'{"n": [1]}') == {"n": [1]}
    too_deep = read_stored(deep(10_000).encode())
    assert too_deep == UndecodableJSON(
        deep(10_000), "nested deeper than 100 levels (at character 105)"
    )
    digits = read_stored('{"n": ' + "9" * 5000 + "}")
    assert isinstance(digits, UndecodableJSON)
    assert digits.reason.startswith("ValueError: Exceeds the limit (4300 digits)")


def test_incoming_json_is_refused_past_the_limit_or_with_a_key_twice() -> None:
    assert loads_incoming(deep(100)) == json.loads(deep(100))
    with pytest.raises(PayloadError, match=r"^is nested deeper than 100 levels \(at character"):
        loads_incoming(deep(2000))
    with pytest.raises(PayloadError, match=r"^has the key 'k' twice in one object"):
        loads_incoming('{"a": [{"k": 1, "k": 1}]}')
    with pytest.raises(json.JSONDecodeError):
        loads_incoming('{"a": ')
