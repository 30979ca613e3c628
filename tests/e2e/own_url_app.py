"""An app that passes its own database_url (from CLI_OWN_DATABASE_URL), as a project's settings
module does: the CLI's --database-url cannot move it, and the CLI says so."""

from __future__ import annotations

import os

import cronbase

app = cronbase.App(database_url=os.environ["CLI_OWN_DATABASE_URL"])


@app.task
def ping() -> str:
    return "pong"
