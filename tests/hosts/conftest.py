"""The hosts tier's fixtures: ``world``, a network of namespaces with PostgreSQL on its ``db``
host (``world.py``); torn down after the test in the order it was built, last first."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.network import Network
from tests.hosts.world import World
from tests.servers import PostgresCluster

_labels = itertools.count(1)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with contextlib.ExitStack() as stack:
        network = stack.enter_context(Network(f"n{next(_labels)}"))
        db = network.add("db")
        cluster = stack.enter_context(PostgresCluster(netns=db.netns, address=db.address))
        made = World(network, cluster, tmp_path)
        stack.callback(made.close)
        yield made
