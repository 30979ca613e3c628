"""One rule for JSON text, stored or coming in: at most ``MAX_JSON_DEPTH`` arrays and objects
deep (checks.py), checked by a scan that does not recurse, before Python's json (which recurses
per level) reads it.

Stored JSON that breaks the rule, or that Python's json cannot read (a 5,000-digit number), reads
back as an :class:`UndecodableJSON` holding its text (:func:`read_stored`, every connection's
json and jsonb loader: db/pool.py), so no view fails on a row other SQL wrote; the claim makes
such a job dead (worker/claim.py). JSON coming in (``--payload``) is refused by
:func:`loads_incoming`; a Python payload by encode.py's checks, at the same depth.
"""

from __future__ import annotations

import json
import re

from ..checks import MAX_JSON_DEPTH
from ..errors import PayloadError
from ..records import UndecodableJSON

# A string (escapes included; one left open runs to the end), or a bracket: a bracket inside a
# string is not nesting. Strings go in one match, so a long one costs no Python step per character.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


def depth_fault(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """Where ``text`` opens an array or object ``limit + 1`` levels deep (its character offset);
    None when it nests no deeper than ``limit``."""
    if text.count("[") + text.count("{") <= limit:
        return None  # too few brackets to nest that deep: the common case, at C speed
    depth = 0
    for token in _TOKENS.finditer(text):
        char = text[token.start()]
        if char == "[" or char == "{":
            depth += 1
            if depth > limit:
                return token.start()
        elif char == "]" or char == "}":
            depth -= 1
    return None


def too_deep(at: int) -> str:
    """The rule broken at character ``at``, in words."""
    return f"nested deeper than {MAX_JSON_DEPTH} levels (at character {at:,})"


def read_stored(data: str | bytes) -> object:
    """A stored JSON value, decoded; an :class:`UndecodableJSON` when it breaks the depth rule
    or Python's json cannot read it (never an exception: one row must not fail a whole list)."""
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    at = depth_fault(text)
    if at is not None:
        return UndecodableJSON(text, too_deep(at))
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # a number of over 4,300 digits; a deep stack
        return UndecodableJSON(text, f"{type(exc).__name__}: {str(exc)[:200]}")


def loads_incoming(text: str) -> object:
    """JSON given to cronbase as text (``--payload``), decoded by the rule stored JSON follows:
    PayloadError for nesting deeper than ``MAX_JSON_DEPTH`` or a key given twice (JSON would
    keep the last without a word); ValueError for text that is not JSON."""
    at = depth_fault(text)
    if at is not None:
        raise PayloadError(
            f"is {too_deep(at)}, the most cronbase stores; flatten it, or store the data "
            "elsewhere and pass its key"
        )
    return json.loads(text, object_pairs_hook=_once_each)


def _once_each(pairs: list[tuple[str, object]]) -> dict[str, object]:
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise PayloadError(
                f"has the key {key!r} twice in one object; JSON would keep only the last: "
                "give each key once"
            )
        found[key] = value
    return found
