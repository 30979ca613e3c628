"""The soak at CI's scale (``SoakConfig.ci()``: 2 minutes, <= 300 jobs/s, 2 workers, a
schedule every 5 s, retention window 18 s, an idle transaction from 0:42 to 1:00) against its
own PostgreSQL: every job ran once, every schedule slot fired once, the workers keep up, the hot
table stays bounded, its live rows and size grow at less than a tenth of what keeping every job
would add (fitted slopes), dead tuples pile up behind the idle transaction and recover after it,
and the p99s stay bounded. The checks are ``bench/soak/analysis.py``'s, the same that fail
``make soak``; the relative slopes (%/h) are reported but decide only runs of 10 minutes or
more. ``CRONBASE_SOAK=off`` skips it (``conftest.py``)."""

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
        "the workers keep up (steady samples)",
        "hot table live rows: no leak",
        "hot table size: no leak",
    } <= names, report
    assert len([s for s in result["samples"] if s["steady"]]) >= 8, report
    assert next(tmp_path.glob("soak-ci-*.json")).stat().st_size > 0, report
