"""payload/sealing.py: what a sealed value is, and every way it refuses to open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cronbase.errors import ConfigurationError
from cronbase.payload.sealing import (
    MARK,
    KeyMissing,
    Keyring,
    SealBroken,
    keyring_from_environment,
    new_key,
    open_json_value,
    sealed_key,
)

K1, K2 = new_key(), new_key()


def ring(text: str) -> Keyring:
    return Keyring.parse(text, "test")


def test_a_sealed_value_names_its_key_and_opens_with_any_key_of_the_ring() -> None:
    old = ring(f"k1={K1}")
    stored = old.seal_json('{"card":"4111"}', "payload")
    envelope = json.loads(stored)
    assert list(envelope) == [MARK]
    assert envelope[MARK]["k"] == "k1"
    assert "4111" not in stored
    assert sealed_key(envelope) == "k1"
    both = ring(f"k2={K2},k1={K1}")
    assert both.primary == "k2"
    assert both.ids == ("k2", "k1")
    assert both.open_json(envelope[MARK], "payload") == '{"card":"4111"}'
    # Two seals of one value differ (a fresh nonce each).
    assert old.seal_json("{}", "payload") != old.seal_json("{}", "payload")
    text = old.seal_text("ValueError: card 4111")
    assert text.startswith("$sealed:k1:")
    assert "4111" not in text
    assert both.open_text(text) == "ValueError: card 4111"
    assert both.open_text("plain error") == "plain error"


def test_a_value_refuses_to_open_with_a_missing_or_wrong_key_or_as_another_kind() -> None:
    sealed = json.loads(ring(f"k1={K1}").seal_json('{"a":1}', "payload"))[MARK]
    with pytest.raises(KeyMissing, match="key 'k1', which is not configured") as missing:
        ring(f"k2={K2}").open_json(sealed, "payload")
    assert missing.value.key_id == "k1"
    with pytest.raises(SealBroken, match="does not open with encryption key 'k1'"):
        ring(f"k1={K2}").open_json(sealed, "payload")  # another key under the same id
    with pytest.raises(SealBroken):  # a payload passed off as a result
        ring(f"k1={K1}").open_json(sealed, "result")
    tampered = dict(sealed, c=sealed["c"][:-4] + ("AAAA" if sealed["c"][-4:] != "AAAA" else "BBBB"))
    with pytest.raises(SealBroken):
        ring(f"k1={K1}").open_json(tampered, "payload")
    with pytest.raises(SealBroken, match="malformed"):
        ring(f"k1={K1}").open_json({"k": "k1"}, "payload")


def test_a_workflow_payload_opens_its_own_envelope_and_its_parents_results() -> None:
    keys = ring(f"k1={K1}")
    own = json.loads(keys.seal_json('{"to":"ana"}', "payload"))
    parent = json.loads(keys.seal_json('"token-1"', "result"))
    merged = {**own, "previous": [parent, 5]}  # jsonb || as a child's claim writes it
    assert open_json_value(keys, merged, "payload", json.loads) == {
        "to": "ana",
        "previous": ["token-1", 5],
    }
    with pytest.raises(KeyMissing):
        open_json_value(None, merged, "payload", json.loads)
    assert open_json_value(None, {"plain": [1, {"x": 2}]}, "payload", json.loads) == {
        "plain": [1, {"x": 2}]
    }


def test_rotation_reseals_every_envelope_with_the_primary() -> None:
    old = ring(f"k1={K1}")
    value = {
        **json.loads(old.seal_json('{"to":"ana"}', "payload")),
        "previous": json.loads(old.seal_json("[1,2]", "result")),
    }
    both = ring(f"k2={K2},k1={K1}")
    again = both.resealed(value, "payload")
    assert sealed_key(again) == "k2"
    assert sealed_key(again["previous"]) == "k2"
    assert open_json_value(ring(f"k2={K2}"), again, "payload", json.loads) == {
        "to": "ana",
        "previous": [1, 2],
    }
    assert both.resealed(again, "payload") == again  # already under the primary: kept
    text = old.seal_text("boom")
    assert ring(f"k2={K2}").open_text(both.resealed_text(text)) == "boom"


def test_keys_come_from_the_environment_or_a_file_and_never_show(tmp_path: Path) -> None:
    assert keyring_from_environment({}) is None
    assert keyring_from_environment({"CRONBASE_ENCRYPTION_KEYS": f"k1={K1}"}).ids == ("k1",)
    secret = tmp_path / "keys"
    secret.write_text(f"# rotated 2026-11\nk2={K2}\nk1={K1}\n")
    keys = keyring_from_environment({"CRONBASE_ENCRYPTION_KEYS_FILE": str(secret)})
    assert keys is not None
    assert keys.ids == ("k2", "k1")
    assert K1 not in repr(keys)
    assert K2 not in repr(keys)
    with pytest.raises(ConfigurationError, match="no-such-file"):
        keyring_from_environment({"CRONBASE_ENCRYPTION_KEYS_FILE": str(tmp_path / "no-such-file")})
    # A callable (a KMS client) is read when asked; a mapping takes text or bytes.
    from_kms = Keyring.from_source(lambda: {"kms-1": K1})
    assert from_kms.primary == "kms-1"
    with pytest.raises(ConfigurationError, match=r"must be 'id=key,\.\.\.' text"):
        Keyring.from_source(42)
