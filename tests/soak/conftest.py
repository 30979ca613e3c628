"""CRONBASE_SOAK=off skips the soak: it starts its own PostgreSQL, so CI's second `make test`
(on another server for the rest of the suite) would only repeat it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CRONBASE_SOAK") != "off":
        return
    skip = pytest.mark.skip(reason="soak: ran in CI's first make test (CRONBASE_SOAK=off)")
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(skip)
