"""What cronbase accepts as a queue or task name, a key, and a payload: checked where a value
comes in (defer, registration, the CLI), so a bad one gets a one-line error naming it instead of
a database error, or a job no worker can serve.

Names: 1 to 100 characters of letters, digits, ``_ - . :``, starting with a letter, a digit or
``_`` (``emails``, ``billing.send_invoice``, ``tenant-7:reports``). Keys (idempotency, dedupe,
effect, schedule): any text but NUL, up to 1,000 characters. Payloads: at most
``max_payload_bytes`` of JSON (default 1 MiB; ``App(max_payload_bytes=...)``), nested at most
``MAX_JSON_DEPTH`` arrays and objects deep (``payload/stored.py`` applies it to stored JSON).
"""

from __future__ import annotations

import re

from .errors import InvalidNameError

# The largest value of PostgreSQL's integer columns (concurrency, max_attempts, max_catch_up).
INT4_MAX = 2**31 - 1
MAX_NAME_LENGTH = 100
MAX_KEY_LENGTH = 1000
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# A handler's return value, stored with its job (App(max_result_bytes=...)).
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
# The deepest nesting of arrays and objects cronbase stores (a payload, a result) or reads back
# as values: the payload object is level 1. Python's json and the checks and converters recurse
# per level, a few frames each, within the interpreter's 1,000 (shared with the caller's stack: a
# web request may be 100 frames deep already); a payload 900 deep failed the checks with a
# RecursionError. Real payloads nest a handful of levels (Ruby's JSON stops at 100, serde_json
# at 128).
MAX_JSON_DEPTH = 100
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-]*")
_SHOWN = 60  # characters of a bad value a message shows


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def check_name(kind: str, value: object) -> str:
    """``value`` if it is a valid queue or task name; InvalidNameError naming it otherwise."""
    if not isinstance(value, str):
        raise InvalidNameError(f"{kind} name must be a string, got {_shown(value)}")
    if not value or len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
        raise InvalidNameError(
            f"invalid {kind} name {_shown(value)}: use 1 to {MAX_NAME_LENGTH} letters, digits "
            "and _ - . : (starting with a letter, a digit or _)"
        )
    return value


def check_key(kind: str, value: object) -> str:
    """``value`` if it can be stored as a key (no NUL, not empty, not too long)."""
    if not isinstance(value, str) or not value:
        raise InvalidNameError(f"{kind} must be a non-empty string, got {_shown(value)}")
    if "\x00" in value:
        raise InvalidNameError(
            f"{kind} {_shown(value)} contains a NUL character (\\x00), which PostgreSQL cannot store"
        )
    if len(value) > MAX_KEY_LENGTH:
        raise InvalidNameError(
            f"{kind} is {len(value)} characters long, more than {MAX_KEY_LENGTH}: {_shown(value)}"
        )
    return value
