"""The chaos tier's gate and fixture: its tests run under ``make chaos``, which sets
``CRONBASE_CHAOS=1``; ``make test`` collects them and skips them, saying so."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos.scenario import Scenario
from tests.servers import PgBouncer, PostgresCluster
from tests.servers import make_cluster as make_cluster
from tests.servers import make_pgbouncer as make_pgbouncer

HERE = Path(__file__).resolve().parent
SKIP = pytest.mark.skip(
    reason="chaos tier: minutes of killed workers and restarted servers; run it with "
    "`make chaos` (which sets CRONBASE_CHAOS=1; CRONBASE_CHAOS_SCALE=0.1 for CI's reduced scale)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CRONBASE_CHAOS") == "1":
        return
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(SKIP)


@pytest.fixture
def open_scenario(
    make_cluster: Callable[[], PostgresCluster],
    make_pgbouncer: Callable[..., PgBouncer],
    tmp_path: Path,
) -> Iterator[Callable[..., Scenario]]:
    """``open_scenario(name, pooler=False, schedule=False)``: a Scenario on a cluster of its own
    (behind pgbouncer in transaction mode with ``pooler``); its workers are killed after the test,
    before the servers stop."""
    opened: list[Scenario] = []

    def open_(name: str, *, pooler: bool = False, schedule: bool = False) -> Scenario:
        cluster = make_cluster()
        bouncer = make_pgbouncer(cluster, pool_mode="transaction") if pooler else None
        scenario = Scenario(name, cluster, tmp_path / name, bouncer=bouncer, schedule=schedule)
        opened.append(scenario)
        return scenario

    yield open_
    for scenario in opened:
        scenario.close()
