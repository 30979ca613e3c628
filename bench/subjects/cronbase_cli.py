"""The bench's cronbase app for ``cronbase --app bench.subjects.cronbase_cli:app worker ...``:
the subject's tasks, on CRONBASE_DATABASE_URL.

The command logs a line per claimed and per finished job at INFO; the drains the bench runs
through the library log nothing (no handler). Raised to WARNING here, so the command's drain
measures the same work (the lines cost more than the supervisor; bench/README.md).
"""

from __future__ import annotations

import logging

from .cronbase_subject import make_app

logging.getLogger("cronbase").setLevel(logging.WARNING)

app = make_app(None)[0]
