"""``cronbase keys``: the encryption keys of encrypted tasks (docs/guides/encryption.md): a new
key, which keys the stored values need, and rotation to the primary key."""

from __future__ import annotations

import json

import click

from ..operations.keys import DEFAULT_BATCH, MAX_BATCH, keys_in_use, rotate
from ..payload.sealing import KEY_ID, new_key
from .common import Settings, cli_actor
from .main import cli


@cli.group()
def keys() -> None:
    """Encryption keys of encrypted tasks (@app.task(encrypt=True)): ``keys new`` makes one,
    ``keys status`` says which keys the stored values need, ``keys rotate`` re-seals them with
    the primary key. The keys come from CRONBASE_ENCRYPTION_KEYS (id=key pairs, the primary
    first), the file CRONBASE_ENCRYPTION_KEYS_FILE names, or App(encryption_keys=...)."""


@keys.command("new")
@click.argument("key_id", default="", required=False)
def new_command(key_id: str) -> None:
    """Print a new key, 32 random bytes in URL-safe base64, as KEY_ID=key (KEY_ID: a name of
    1 to 40 letters, digits, _ . -; default: key-YYYYMMDD). Nothing is stored: put it first in
    CRONBASE_ENCRYPTION_KEYS to make it the primary key, keep the old ones after it, and run
    ``cronbase keys rotate``."""
    if not key_id:
        from datetime import UTC, datetime

        key_id = f"key-{datetime.now(UTC):%Y%m%d}"
    if not KEY_ID.fullmatch(key_id):
        raise click.BadParameter(
            f"{key_id!r}: use 1 to 40 letters, digits, _ . -", param_hint="KEY_ID"
        )
    click.echo(f"{key_id}={new_key()}")


@keys.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status_command(settings: Settings, as_json: bool) -> None:
    """The keys configured here (the primary first) and how many stored values each key seals
    (every job, live and finished, and every attempt is read); a key no value needs can be
    dropped, a needed key that is not configured is named."""
    db = settings.app().db
    ring = db.keys
    configured = list(ring.ids) if ring is not None else []
    used = keys_in_use(db)
    if as_json:
        click.echo(json.dumps({"configured": configured, "in_use": used}))
        return
    if not configured:
        click.echo("no encryption keys configured here (CRONBASE_ENCRYPTION_KEYS)")
    for key_id in configured:
        role = "primary" if key_id == configured[0] else "old"
        count = used.get(key_id, 0)
        needed = f"seals {count} stored values" if count else "no stored value needs it"
        click.echo(f"{key_id} ({role}): {needed}")
    for key_id, count in sorted(used.items()):
        if key_id not in configured:
            click.echo(f"{key_id} (not configured here): seals {count} stored values")


@keys.command("rotate")
@click.option(
    "--batch",
    type=click.IntRange(1, MAX_BATCH),
    default=DEFAULT_BATCH,
    show_default=True,
    help="Rows per transaction.",
)
@click.pass_obj
def rotate_command(settings: Settings, batch: int) -> None:
    """Re-seal every stored value (arguments, results, errors of live and finished jobs) that
    another key sealed with the primary key: online, in batches, beside running workers;
    stopped half way, run it again. Every key still in use must be configured (after the
    primary). Afterwards the keys no value needs can be removed from the configuration."""
    done = rotate(settings.app().db, batch=batch, progress=click.echo, actor=cli_actor())
    total = sum(done.rewritten.values())
    click.echo(f"re-sealed {total} rows with key {done.primary!r} in {done.passes} passes")
    for line in done.broken:  # left as they are: an operator's to look at
        click.echo(f"not re-sealed: {line}", err=True)
    if done.passed_over or done.still_needed:
        needed = ", ".join(map(repr, done.still_needed)) or "old keys"
        click.echo(
            f"{done.passed_over} rows changed under it in its last pass, and stored values "
            f"still need {needed}: run it again (are workers still sealing with an old "
            "primary key?)",
            err=True,
        )
        raise SystemExit(1)
    click.echo(f"every stored value is sealed with {done.primary!r}")
    if done.droppable:
        click.echo(f"no stored value needs {', '.join(map(repr, done.droppable))}: remove it")
