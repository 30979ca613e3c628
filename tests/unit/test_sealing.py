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
    stored = old.seal_json('{"card":"4111"}', "payload", "charge")
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
    assert old.seal_json("{}", "payload", "t") != old.seal_json("{}", "payload", "t")
    text = old.seal_text("ValueError: card 4111")
    assert text.startswith("$sealed:k1:")
    assert "4111" not in text
    assert both.open_text(text) == "ValueError: card 4111"
    assert both.open_text("plain error") == "plain error"


def test_a_value_refuses_to_open_with_a_missing_or_wrong_key_or_as_another_kind() -> None:
    sealed = json.loads(ring(f"k1={K1}").seal_json('{"a":1}', "payload", "t"))[MARK]
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
    own = json.loads(keys.seal_json('{"to":"ana"}', "payload", "notify", receives="previous"))
    parent = json.loads(keys.seal_json('"token-1"', "result", "make_token"))
    merged = {**own, "previous": [parent, 5]}  # jsonb || as a child's claim writes it
    assert open_json_value(keys, merged, "payload", json.loads, "notify") == {
        "to": "ana",
        "previous": ["token-1", 5],
    }
    with pytest.raises(KeyMissing):
        open_json_value(None, merged, "payload", json.loads)
    # A plain child of a sealed parent: the parent's result opened, the rest as it is.
    plain_child = {"to": "bo", "previous": parent, "data": {"$sealed": True, "x": [{"$sealed": 1}]}}
    assert open_json_value(keys, plain_child, "payload", json.loads) == {
        "to": "bo",
        "previous": "token-1",
        "data": {"$sealed": True, "x": [{"$sealed": 1}]},  # a "$sealed" of another shape: data
    }


def test_sealed_arguments_refuse_plain_members_and_another_task() -> None:
    keys = ring(f"k1={K1}")
    own = json.loads(keys.seal_json('{"email":"ana@x","token":"t-1"}', "payload", "reset"))
    # Other SQL adds a plain member beside the sealed arguments, to override them: refused.
    with pytest.raises(SealBroken, match="plain member 'email' beside a sealed payload"):
        open_json_value(keys, {**own, "email": "evil@x"}, "payload", json.loads, "reset")
    # Moved to a job of another task: refused (the task is bound to the ciphertext too).
    with pytest.raises(SealBroken, match="sealed for task 'reset' is in a job of task 'other'"):
        open_json_value(keys, own, "payload", json.loads, "other")
    forged = {MARK: {**own[MARK], "t": "other"}}
    with pytest.raises(SealBroken, match="does not open"):
        open_json_value(keys, forged, "payload", json.loads, "other")
    with_member = json.loads(keys.seal_json("{}", "payload", "reset", receives="previous"))
    renamed = {MARK: {**with_member[MARK], "r": "email"}, "email": "evil@x"}
    with pytest.raises(SealBroken, match="does not open"):
        open_json_value(keys, renamed, "payload", json.loads, "reset")


def test_rotation_reseals_every_envelope_in_place() -> None:
    old = ring(f"k1={K1}")
    own = json.loads(old.seal_json('{"to":"ana"}', "payload", "n", receives="previous"))
    parent = json.loads(old.seal_json("[1,2]", "result", "p"))
    # As PostgreSQL writes the jsonb: members by length, then bytes; ", " and ": ".
    own_c, parent_c = own[MARK]["c"], parent[MARK]["c"]
    stored = (
        f'{{"$sealed": {{"c": "{own_c}", "k": "k1", "r": "previous", "t": "n"}}, '
        f'"previous": [{{"$sealed": {{"c": "{parent_c}", "k": "k1", "t": "p"}}}}, 1.10, 1e400]}}'
    )
    both = ring(f"k2={K2},k1={K1}")
    again = both.resealed_json(stored, "payload")
    assert again.count('"k": "k2"') == 2
    assert '"k1"' not in again
    assert again.endswith(", 1.10, 1e400]}")  # numbers as stored: not read into floats
    value = json.loads(again)
    assert open_json_value(ring(f"k2={K2}"), value, "payload", json.loads, "n") == {
        "to": "ana",
        "previous": [[1, 2], 1.1, float("inf")],
    }
    assert both.resealed_json(again, "payload") == again  # already under the primary: kept
    text = old.seal_text("boom")
    assert ring(f"k2={K2}").open_text(both.resealed_text(text)) == "boom"


def test_a_key_given_without_its_id_is_never_shown() -> None:
    for given in (K1, K1.rstrip("="), f"{K1},k2={K2}"):
        with pytest.raises(ConfigurationError) as info:
            Keyring.parse(given, "CRONBASE_ENCRYPTION_KEYS")
        message = str(info.value)
        assert K1.rstrip("=")[:8] not in message, message
        assert "\n" not in message


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
