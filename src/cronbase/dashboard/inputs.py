"""What the pages and actions take from a request, checked where it comes in: form fields without
NUL, whole numbers within their bounds. A bad value is a 400 whose one line names it, never a
database error (the query string's NUL is refused earlier, in doors.py).
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

BIGINT_MAX = 2**63 - 1  # a job id
_SHOWN = 60  # characters of a bad value a message shows


def shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


async def form(request: Request) -> FormData:
    """The request's form (parsed once), refused when a field holds a NUL character, which
    PostgreSQL cannot store and no name, key or number contains."""
    found = await request.form()
    for name, value in found.multi_items():
        if "\x00" in name or (isinstance(value, str) and "\x00" in value):
            raise HTTPException(
                400,
                f"the form field {shown(name)} contains a NUL character (\\x00), which no name, "
                "key or number can hold",
            )
    return found


async def field(request: Request, name: str, *, max_length: int | None = None) -> str:
    """A form field that must be given (surrounding spaces dropped)."""
    value = (await form(request)).get(name)
    if not isinstance(value, str) or not value.strip():
        raise HTTPException(400, f"the form field {name!r} is missing")
    if max_length is not None and len(value.strip()) > max_length:
        raise HTTPException(
            400,
            f"the form field {name!r} is {len(value.strip())} characters, more than "
            f"{max_length}: {shown(value.strip())}",
        )
    return value.strip()


def whole_number(what: str, value: str, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high``: ASCII digits only (``int()`` would also take
    ``1_000``, ``٣`` and spaces, and raises on more than 4,300 digits)."""
    digits = value.strip()
    if not (
        digits.isascii()
        and digits.isdigit()
        and len(digits) <= len(str(high))
        and low <= int(digits) <= high
    ):
        raise HTTPException(
            400, f"{what} must be a whole number from {low} to {high}, got {shown(value)}"
        )
    return int(digits)


SEARCH_MAX_LENGTH = 200  # longer than any id or key an operator types; a 10 kB paste is refused


def search_term(value: str | None) -> str | None:
    """The job list's search text (surrounding spaces dropped), None when empty; refused when
    longer than anyone types (the text match reads payloads with it: a pasted megabyte would
    cost a scan of them all for nothing)."""
    term = (value or "").strip() or None
    if term is not None and len(term) > SEARCH_MAX_LENGTH:
        raise HTTPException(
            400, f"the search is {len(term)} characters, more than {SEARCH_MAX_LENGTH}"
        )
    return term
