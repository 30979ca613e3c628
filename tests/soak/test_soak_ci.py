"""The soak at CI's scale (``SoakConfig.ci()``: 2 minutes, <= 300 jobs/s, 2 workers, a
schedule every 5 s, retention window 18 s, an idle transaction from 0:42 to 1:00) against its
own PostgreSQL: every job ran once, every schedule slot fired once, the hot table stays
bounded, dead tuples pile up behind the idle transaction and recover after it, and the p99s stay
bounded. The checks are ``bench/soak/analysis.py``'s, the same that fail ``make soak``; the
slopes are reported but decide only runs of 10 minutes or more."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.config import SoakConfig
from bench.soak.run import run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def test_soak_at_small_scale_keeps_its_invariants(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run(SoakConfig.ci(), tmp_path, log=lines.append)
    report = "\n".join(lines) + "\n" + result["markdown"]

    executions = result["executions"]
    assert executions["deferred"] > 10_000, report
    assert executions["lost"] == 0, report
    assert executions["twice"] == 0, report
    assert result["ticks"]["duplicates"] == 0, report
    failed = [c["check"] for c in result["checks"] if c["ok"] is False]
    assert not failed, report
    names = {c["check"] for c in result["checks"] if c["ok"] is True}
    assert {
        "hot table size bounded before the idle transaction",
        "hot table size bounded after it",
        "the idle transaction held dead tuples back",
        "dead tuples recover after it",
    } <= names, report
    assert (tmp_path / next(tmp_path.glob("soak-ci-*.json")).name).exists()
