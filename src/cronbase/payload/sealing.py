"""Encrypted arguments, results and errors (``@app.task(encrypt=True)``;
docs/guides/encryption.md): AES-256-GCM under a keyring's primary key, each stored value
naming the key that sealed it.

Stored forms, chosen so that SQL can see which key a row needs and nothing else:

- JSON (a payload, a result): ``{"$sealed": {"k": "<key id>", "c": "<base64url>"}}``, an object,
  so a payload stays an object (a workflow's received results are merged beside it by jsonb's
  ``||``) and ``payload->'$sealed'->>'k'`` finds the rows a key still opens (rotation, and the
  check before a key is dropped);
- text (an error message, a traceback): ``$sealed:<key id>:<base64url>``.

``c`` is the 12-byte nonce, then the ciphertext and its 16-byte tag. The associated data is the
kind of value (payload, result, error): a sealed result cannot be passed off as a payload. A
nonce is random per value: 2**32 values under one key keep the chance of a repeat below 2**-32,
NIST's bound for random GCM nonces; rotate keys well before (``cronbase keys rotate``).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from ..errors import ConfigurationError, CronbaseError
from ..records import Encrypted

MARK = "$sealed"
TEXT_PREFIX = MARK + ":"
# The marker as it appears in stored JSON text: a cheap test (C speed) before any walk.
MARK_IN_JSON = '"' + MARK + '"'
Kind = Literal["payload", "result", "error"]
KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,40}")
KEY_BYTES = 32
NONCE_BYTES = 12
ENV_KEYS = "CRONBASE_ENCRYPTION_KEYS"
ENV_KEYS_FILE = "CRONBASE_ENCRYPTION_KEYS_FILE"


class EncryptionError(CronbaseError):
    """A sealed value that cannot be opened here: its key is not configured (:class:`KeyMissing`)
    or it does not open with the key of that id (:class:`SealBroken`). ``key_id`` names it."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


class KeyMissing(EncryptionError):
    """The value was sealed with a key this process does not have."""


class KeysUnavailable(EncryptionError):
    """This process's keys cannot be read (a bad CRONBASE_ENCRYPTION_KEYS, a secret file not
    mounted, a KMS that failed): no sealed value opens until they can."""


class SealBroken(EncryptionError):
    """The value does not open with the key of its id: another key under the same id, or the
    stored value was changed."""


def _aead() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - the extra is part of every test environment
        raise ConfigurationError(
            "encryption needs the cryptography package: pip install 'cronbase[encryption]'"
        ) from None
    return AESGCM


def _named(key_id: object) -> str:
    """A key id as messages show it: quoted when it is one, else only its length (a key given
    without its id reads as an id: base64's padding '=' splits it, and it must not be shown)."""
    if isinstance(key_id, str) and len(key_id) <= 40:  # a key is 43 characters or more
        return repr(key_id)
    if isinstance(key_id, str):
        return f"(not a valid id: {len(key_id)} characters; a key given without its id?)"
    return f"(not a valid id: {type(key_id).__name__})"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    # validate: a character outside the alphabet is an error, not skipped (urlsafe_b64decode's).
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def new_key() -> str:
    """A fresh key: 32 random bytes in URL-safe base64 (``cronbase keys new``)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


class Keyring:
    """The keys a process seals and opens with, by id; the first is primary (what new values
    are sealed with). Key material never appears in a message, a repr or a log: only ids."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise ConfigurationError("an encryption keyring needs at least one key")
        aead = _aead()
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not KEY_ID.fullmatch(key_id):
                raise ConfigurationError(
                    f"invalid encryption key id {_named(key_id)}: use 1 to 40 letters, "
                    "digits, _ . -"
                )
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ConfigurationError(
                    f"encryption key {_named(key_id)} must be {KEY_BYTES} bytes (URL-safe base64 of "
                    f"{KEY_BYTES} random bytes: cronbase keys new), got "
                    f"{len(key) if isinstance(key, bytes) else type(key).__name__}"
                )
        self._ciphers = {key_id: aead(key) for key_id, key in keys.items()}
        self.primary: str = next(iter(keys))

    @property
    def ids(self) -> tuple[str, ...]:
        """The key ids, the primary first."""
        return tuple(self._ciphers)

    def __repr__(self) -> str:
        return f"Keyring(primary={self.primary!r}, ids={list(self.ids)!r})"

    @classmethod
    def parse(cls, text: str, source: str) -> Keyring:
        """``id=key`` pairs separated by commas (or new lines), the first primary; ``source``
        names where they came from in a message (never the key)."""
        keys: dict[str, bytes] = {}
        for item in re.split(r"[,\n]", text):
            item = item.strip()
            if not item or item.startswith("#"):
                continue
            key_id, eq, encoded = item.partition("=")
            key_id = key_id.strip()
            if not eq:
                raise ConfigurationError(
                    f"{source}: expected id=key pairs separated by commas, got an item of "
                    f"{len(item)} characters without '='"
                )
            if key_id in keys:
                raise ConfigurationError(
                    f"{source}: encryption key id {_named(key_id)} given twice"
                )
            try:
                keys[key_id] = _unb64(encoded.strip())
            except (binascii.Error, ValueError):
                raise ConfigurationError(
                    f"{source}: encryption key {_named(key_id)} is not URL-safe base64"
                ) from None
        if not keys:
            raise ConfigurationError(f"{source}: no encryption key given")
        return cls(keys)

    @classmethod
    def from_source(cls, source: object, where: str = "encryption_keys") -> Keyring:
        """A keyring from what ``App(encryption_keys=...)`` takes."""
        if isinstance(source, Keyring):
            return source
        if callable(source):
            return cls.from_source(source(), f"{where}()")
        if isinstance(source, str):
            return cls.parse(source, where)
        if isinstance(source, Mapping):
            keys: dict[str, bytes] = {}
            for key_id, key in source.items():
                if isinstance(key, str):
                    try:
                        key = _unb64(key.strip())
                    except (binascii.Error, ValueError):
                        raise ConfigurationError(
                            f"{where}: encryption key {_named(key_id)} is not URL-safe base64"
                        ) from None
                keys[key_id] = key
            return cls(keys)
        raise ConfigurationError(
            f"{where} must be 'id=key,...' text, a mapping of ids to keys, a Keyring or a "
            f"callable returning one, got {type(source).__name__}"
        )

    # Sealing: what the primary key writes.

    def _seal(self, plain: str, bound: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.primary].encrypt(nonce, plain.encode(), bound)
        return _b64(nonce + sealed)

    def seal_json(self, text: str, kind: Kind, task: str, receives: str | None = None) -> str:
        """JSON text (a payload's, a result's) of a job of ``task`` as the stored envelope,
        itself JSON text. ``receives``: the one plain member a workflow may merge beside a
        payload (its parents' results, under the parameter that receives them)."""
        sealed = self._seal(text, _bound(kind, task, receives))
        # The key id, task and parameter names are of [A-Za-z0-9_.:@-]: nothing to escape.
        also = "" if receives is None else f',"r":"{receives}"'
        return f'{{"{MARK}":{{"k":"{self.primary}","t":"{task}"{also},"c":"{sealed}"}}}}'

    def seal_text(self, text: str) -> str:
        """An error message or a traceback as stored text."""
        return f"{TEXT_PREFIX}{self.primary}:{self._seal(text, _bound('error', '', None))}"

    # Opening: any key of the ring.

    def _open(self, key_id: object, data: object, kind: Kind, bound: bytes) -> str:
        if not isinstance(key_id, str) or not isinstance(data, str):
            raise SealBroken(f"a sealed {kind} is malformed", "?")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise missing(key_id, kind, self.ids)
        try:
            raw = _unb64(data)
            return str(cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], bound).decode())
        except Exception:  # InvalidTag, a short or bad base64 text: the same to the reader
            raise SealBroken(
                f"a sealed {kind} does not open with encryption key {_named(key_id)}: another key "
                "was configured under that id, or the stored value was changed",
                key_id,
            ) from None

    def open_json(self, envelope: Mapping[str, Any], kind: Kind) -> str:
        """The JSON text a stored envelope (the ``$sealed`` member) holds; its task and merged
        member are authenticated with it."""
        task, receives = envelope.get("t"), envelope.get("r")
        if not isinstance(task, str) or not isinstance(receives, str | None):
            raise SealBroken(f"a sealed {kind} is malformed", str(envelope.get("k")))
        bound = _bound(kind, task, receives)
        return self._open(envelope.get("k"), envelope.get("c"), kind, bound)

    # Rotation: what another key sealed, sealed again with the primary.

    def resealed_json(self, text: str, kind: Kind) -> str:
        """A stored JSON value's text (as PostgreSQL writes jsonb) with every envelope cronbase
        reads in it sealed with the primary key. Only the envelopes' ciphertext and key id
        change, in place in the text: every other byte stays as stored (a number is not read
        into a float and written back)."""
        for envelope, envelope_kind in envelopes(json.loads(text), kind):
            if envelope.get("k") == self.primary:
                continue
            plain = self.open_json(envelope, envelope_kind)
            bound = _bound(envelope_kind, envelope["t"], envelope.get("r"))
            # jsonb writes an object's members by length, then bytes: "c" before "k".
            old = f'"c": "{envelope["c"]}", "k": "{envelope["k"]}"'
            new = f'"c": "{self._seal(plain, bound)}", "k": "{self.primary}"'
            if text.count(old) != 1:
                raise SealBroken(f"a sealed {envelope_kind} is not where it was read", "?")
            text = text.replace(old, new)
        return text

    def resealed_text(self, text: str) -> str:
        """A stored error or traceback under the primary key (plain text as is)."""
        key_id = sealed_key(text)
        if key_id is None or key_id == self.primary:
            return text
        return self.seal_text(self.open_text(text))

    def open_text(self, text: str) -> str:
        """An error message or traceback as written, from its stored text (plain text as is)."""
        if not text.startswith(TEXT_PREFIX):
            return text
        key_id, _, data = text[len(TEXT_PREFIX) :].partition(":")
        return self._open(key_id, data, "error", _bound("error", "", None))


def _bound(kind: Kind, task: str, receives: str | None) -> bytes:
    """The associated data of a sealed value: what it is (a payload, a result, an error), for
    which task, and which plain member may be merged beside it. A value moved to another kind,
    task or member does not open."""
    return f"cronbase-1\x00{kind}\x00{task}\x00{receives or ''}".encode()


def is_envelope(value: object) -> bool:
    """A stored sealed JSON value: ``{"$sealed": {"k": ..., "c": ..., ...}}`` and nothing else
    (a ``$sealed`` member of any other shape is a payload's own data)."""
    if not isinstance(value, dict) or MARK not in value:
        return False
    inner = value[MARK]
    return (
        isinstance(inner, dict)
        and isinstance(inner.get("k"), str)
        and isinstance(inner.get("c"), str)
    )


def envelopes(value: Any, kind: Kind) -> list[tuple[dict[str, Any], Kind]]:
    """The envelopes (their ``$sealed`` members) cronbase reads in a stored JSON value, with
    their kind: the value's own, and a workflow's sealed results merged into a payload, as a
    member or a list of them (a group's). Nowhere deeper: deeper ``$sealed`` keys are data."""
    if not isinstance(value, dict):
        return []
    found: list[tuple[dict[str, Any], Kind]] = []
    if MARK in value:
        if not is_envelope({MARK: value[MARK]}):
            raise SealBroken(f"a sealed {kind} is malformed", "?")
        found.append((value[MARK], kind))
    for name, item in value.items():
        if name == MARK:
            continue
        for member in item if isinstance(item, list) else [item]:
            if is_envelope(member):
                found.append((member[MARK], "result"))
    return found


# What App(encryption_keys=...) takes: "id=key,..." text, {id: key} in order (the first is
# primary), a Keyring, or a callable returning one of those (a KMS client, read once).
KeySource = str | Mapping[str, str | bytes] | Keyring | Callable[[], Any]


# A task's name -> the keyring its values are sealed with (Database.sealing_keys: a
# ConfigurationError naming the task when no keys are configured).
SealingKeys = Callable[[str], Keyring]


def sealed_payload(
    text: str, task: str, keys: SealingKeys | None, receives: str | None = None
) -> str:
    """An encrypted task's payload JSON text as stored (``receives``: the parameter a workflow
    merges its parents' results into, the one plain member allowed beside it)."""
    if keys is None:
        raise ConfigurationError(
            f"task {task!r} is encrypted (encrypt=True) but no encryption keys are configured"
        )
    return keys(task).seal_json(text, "payload", task, receives)


def missing(key_id: str, kind: str, have: tuple[str, ...] = ()) -> KeyMissing:
    configured = f"configured: {', '.join(have)}" if have else "no keys are configured here"
    return KeyMissing(
        f"a sealed {kind} needs encryption key {_named(key_id)}, which is not configured "
        f"({configured}; {ENV_KEYS} or App(encryption_keys=...))",
        key_id,
    )


def sealed_key(value: object) -> str | None:
    """The key id of a stored sealed value (JSON as decoded, or text); None when plain."""
    if isinstance(value, str):
        if value.startswith(TEXT_PREFIX):
            return value[len(TEXT_PREFIX) :].partition(":")[0]
        return None
    if isinstance(value, dict):
        envelope = value.get(MARK)
        if isinstance(envelope, dict):
            key_id = envelope.get("k")
            return key_id if isinstance(key_id, str) else "?"
    return None


def open_json_value(
    keys: Keyring | None,
    value: Any,
    kind: Kind,
    loads: Callable[[str], Any],
    task: str | None = None,
) -> Any:
    """A decoded stored JSON value with the sealed envelopes cronbase writes opened: the value's
    own (sealed for ``task``, when given: the job's), and the sealed results of parents a
    workflow merged into a payload. Beside a sealed payload, only the member its envelope
    names may be plain (those results): a plain field added by other SQL beside sealed
    arguments is refused, not merged over them. EncryptionError when one cannot be opened."""
    if not isinstance(value, dict):
        return value
    if MARK not in value:  # plain, perhaps holding a sealed parent's results
        return {name: _opened_member(keys, item, loads) for name, item in value.items()}
    envelope = value[MARK]
    if not is_envelope({MARK: envelope}):
        raise SealBroken(f"a sealed {kind} is malformed", "?")
    key_id = envelope["k"]
    if task is not None and envelope.get("t") != task:
        raise SealBroken(
            f"a {kind} sealed for task {envelope.get('t')!r} is in a job of task {task!r}",
            key_id,
        )
    extra = [name for name in value if name != MARK]
    merged = envelope.get("r")
    if any(name != merged for name in extra):
        wrong = next(name for name in extra if name != merged)
        raise SealBroken(
            f"a plain member {wrong!r} beside a sealed {kind}: only the workflow's "
            f"{merged!r} may be",
            key_id,
        )
    if keys is None:
        raise missing(key_id, kind)
    inner = loads(keys.open_json(envelope, kind))
    if extra and isinstance(inner, dict) and isinstance(merged, str):
        return {**inner, merged: _opened_member(keys, value[merged], loads)}
    return inner


def _opened_member(keys: Keyring | None, item: Any, loads: Callable[[str], Any]) -> Any:
    """A payload's member as a workflow merged it: a parent's sealed result opened, or each of
    a group's; anything else as it is."""
    if is_envelope(item):
        return open_json_value(keys, item, "result", loads)
    if isinstance(item, list) and any(is_envelope(i) for i in item):
        return [open_json_value(keys, i, "result", loads) if is_envelope(i) else i for i in item]
    return item


def open_stored_json(
    keys: Keyring | None, value: Any, kind: Kind, loads: Callable[[str], Any]
) -> Any:
    """For views: a stored JSON value opened, or an :class:`Encrypted` naming the key when this
    process cannot open it (views show that, never the ciphertext)."""
    try:
        return open_json_value(keys, value, kind, loads)
    except EncryptionError as exc:
        return Encrypted(exc.key_id, str(exc))


def open_stored_text(keys: Keyring | None, text: str | None) -> str | None:
    """For views: an error or traceback as written, or a line naming the key it needs."""
    if text is None or not text.startswith(TEXT_PREFIX):
        return text
    key_id = sealed_key(text) or "?"
    if keys is None:
        return str(Encrypted(key_id, str(missing(key_id, "error"))))
    try:
        return keys.open_text(text)
    except EncryptionError as exc:
        return str(Encrypted(key_id, str(exc)))


# The columns views read that an encrypted task's jobs hold sealed (jobs, jobs_history,
# job_attempts, and the statements that select them under these names).
_JSON_COLUMNS: tuple[tuple[str, Kind], ...] = (("payload", "payload"), ("result", "result"))
_TEXT_COLUMNS = ("last_error", "error", "traceback")
SEALED_COLUMNS = ("payload", "result", *_TEXT_COLUMNS)


def _holds_sealed(value: object) -> bool:
    """Whether a decoded JSON value holds a sealed envelope: its own, or a workflow's results
    merged into it (a parent's result, or a group's list of them)."""
    if not isinstance(value, dict):
        return False
    if MARK in value:
        return True
    for item in value.values():
        if is_envelope(item) or (isinstance(item, list) and any(is_envelope(i) for i in item)):
            return True
    return False


def may_be_sealed(value: object) -> bool:
    """Whether a column's value may hold a sealed value: JSON (an object) or sealed text."""
    return isinstance(value, dict) or (isinstance(value, str) and value.startswith(TEXT_PREFIX))


def open_row(keys: Keyring | None, row: dict[str, Any], loads: Callable[[str], Any]) -> None:
    """A row as views read it, in place: its sealed payload, result and errors opened (or an
    :class:`Encrypted` naming the key this process lacks), and ``encrypted_with`` the key id
    when any was sealed. Plain rows cost a few dict look-ups."""
    sealed_with: str | None = None
    for column, kind in _JSON_COLUMNS:
        value = row.get(column)
        if _holds_sealed(value):
            sealed_with = sealed_with or sealed_key(value)
            row[column] = open_stored_json(keys, value, kind, loads)
    for column in _TEXT_COLUMNS:
        text = row.get(column)
        if isinstance(text, str) and text.startswith(TEXT_PREFIX):
            sealed_with = sealed_with or sealed_key(text)
            row[column] = open_stored_text(keys, text)
    if sealed_with is not None:
        row["encrypted_with"] = sealed_with


def keyring_from_environment(environ: Mapping[str, str] = os.environ) -> Keyring | None:
    """``CRONBASE_ENCRYPTION_KEYS`` (``id=key,...``), else the file ``CRONBASE_ENCRYPTION_KEYS_FILE``
    names (the same text: a Docker or Kubernetes secret); None when neither is set."""
    text = environ.get(ENV_KEYS, "").strip()
    if text:
        return Keyring.parse(text, ENV_KEYS)
    path = environ.get(ENV_KEYS_FILE, "").strip()
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            content = file.read()
    except OSError as exc:
        raise ConfigurationError(f"{ENV_KEYS_FILE}={path!r}: {exc.strerror}") from None
    return Keyring.parse(content, f"{ENV_KEYS_FILE} ({path})")
