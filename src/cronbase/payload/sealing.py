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
                    f"invalid encryption key id {key_id!r}: use 1 to 40 letters, digits, _ . -"
                )
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ConfigurationError(
                    f"encryption key {key_id!r} must be {KEY_BYTES} bytes (URL-safe base64 of "
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
                    f"{source}: expected id=key pairs separated by commas, got an item without "
                    f"'=' (starting {item[:6]!r}...)"
                )
            if key_id in keys:
                raise ConfigurationError(f"{source}: encryption key id {key_id!r} given twice")
            try:
                keys[key_id] = _unb64(encoded.strip())
            except (binascii.Error, ValueError):
                raise ConfigurationError(
                    f"{source}: encryption key {key_id!r} is not URL-safe base64"
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
                            f"{where}: encryption key {key_id!r} is not URL-safe base64"
                        ) from None
                keys[key_id] = key
            return cls(keys)
        raise ConfigurationError(
            f"{where} must be 'id=key,...' text, a mapping of ids to keys, a Keyring or a "
            f"callable returning one, got {type(source).__name__}"
        )

    # Sealing: what the primary key writes.

    def _seal(self, plain: str, kind: Kind) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.primary].encrypt(nonce, plain.encode(), kind.encode())
        return _b64(nonce + sealed)

    def seal_json(self, text: str, kind: Kind) -> str:
        """JSON text (a payload's, a result's) as the stored envelope, itself JSON text."""
        sealed = self._seal(text, kind)  # base64url and an id of [A-Za-z0-9_.-]: no escaping
        return f'{{"{MARK}":{{"k":"{self.primary}","c":"{sealed}"}}}}'

    def seal_text(self, text: str) -> str:
        """An error message or a traceback as stored text."""
        return f"{TEXT_PREFIX}{self.primary}:{self._seal(text, 'error')}"

    # Opening: any key of the ring.

    def _open(self, key_id: object, data: object, kind: Kind) -> str:
        if not isinstance(key_id, str) or not isinstance(data, str):
            raise SealBroken(f"a sealed {kind} is malformed (key id {key_id!r})", str(key_id))
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise missing(key_id, kind, self.ids)
        try:
            raw = _unb64(data)
            return str(cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], kind.encode()).decode())
        except Exception:  # InvalidTag, a short or bad base64 text: the same to the reader
            raise SealBroken(
                f"a sealed {kind} does not open with encryption key {key_id!r}: another key "
                "was configured under that id, or the stored value was changed",
                key_id,
            ) from None

    def open_json(self, envelope: Mapping[str, Any], kind: Kind) -> str:
        """The JSON text a stored envelope's ``$sealed`` member holds."""
        return self._open(envelope.get("k"), envelope.get("c"), kind)

    # Rotation: what another key sealed, sealed again with the primary.

    def resealed(self, value: Any, kind: Kind) -> Any:
        """A decoded stored JSON value with every envelope in it under the primary key (those
        under it already are kept as they are)."""
        if isinstance(value, dict):
            out = {
                name: self.resealed(item, "result") for name, item in value.items() if name != MARK
            }
            envelope = value.get(MARK)
            if not isinstance(envelope, dict):
                return out
            if envelope.get("k") != self.primary:
                plain = self.open_json(envelope, kind)
                envelope = {"k": self.primary, "c": self._seal(plain, kind)}
            return {MARK: envelope, **out}
        if isinstance(value, list):
            return [self.resealed(item, kind) for item in value]
        return value

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
        return self._open(key_id, data, "error")


# What App(encryption_keys=...) takes: "id=key,..." text, {id: key} in order (the first is
# primary), a Keyring, or a callable returning one of those (a KMS client, read once).
KeySource = str | Mapping[str, str | bytes] | Keyring | Callable[[], Any]


# A task's name -> the keyring its values are sealed with (Database.sealing_keys: a
# ConfigurationError naming the task when no keys are configured).
SealingKeys = Callable[[str], Keyring]


def sealed_payload(text: str, task: str, keys: SealingKeys | None) -> str:
    """An encrypted task's payload JSON text as stored."""
    if keys is None:
        raise ConfigurationError(
            f"task {task!r} is encrypted (encrypt=True) but no encryption keys are configured"
        )
    return keys(task).seal_json(text, "payload")


def missing(key_id: str, kind: str, have: tuple[str, ...] = ()) -> KeyMissing:
    configured = f"configured: {', '.join(have)}" if have else "no keys are configured here"
    return KeyMissing(
        f"a sealed {kind} needs encryption key {key_id!r}, which is not configured "
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
    keys: Keyring | None, value: Any, kind: Kind, loads: Callable[[str], Any]
) -> Any:
    """A decoded stored JSON value with every sealed envelope in it opened: the payload's own,
    and the sealed results of parents a workflow merged beside it. EncryptionError when one
    cannot be opened here."""
    if isinstance(value, dict):
        envelope = value.get(MARK)
        rest = {
            name: open_json_value(keys, item, "result", loads)
            for name, item in value.items()
            if name != MARK
        }
        if not isinstance(envelope, dict):
            return rest
        key_id = envelope.get("k")
        if keys is None:
            raise missing(str(key_id), kind)
        inner = loads(keys.open_json(envelope, kind))
        if rest and isinstance(inner, dict):
            return {**inner, **rest}
        return inner
    if isinstance(value, list):
        return [open_json_value(keys, item, kind, loads) for item in value]
    return value


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
        if isinstance(item, dict) and MARK in item:
            return True
        if isinstance(item, list) and any(isinstance(i, dict) and MARK in i for i in item):
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
