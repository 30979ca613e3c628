"""The hosts tier's fixtures: ``world``, a network of namespaces with PostgreSQL on its ``db``
host (``world.py``); torn down after the test in the order it was built, last first."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.network import Network
from tests.hosts.world import World
from tests.servers import PostgresCluster

_labels = itertools.count(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """CRONBASE_HOSTS=off skips the tier: CI runs `make test` twice (on two PostgreSQL servers
    for the rest of the suite), and this tier builds its own servers, so its second pass would
    repeat the first."""
    if os.environ.get("CRONBASE_HOSTS") != "off":
        return
    skip = pytest.mark.skip(reason="hosts tier: ran in CI's first make test (CRONBASE_HOSTS=off)")
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(skip)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with contextlib.ExitStack() as stack:
        network = stack.enter_context(Network(f"n{next(_labels)}"))
        db = network.add("db")
        cluster = stack.enter_context(PostgresCluster(netns=db.netns, address=db.address))
        made = World(network, cluster, tmp_path)
        stack.callback(made.close)
        yield made
