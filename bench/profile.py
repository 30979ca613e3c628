"""``--profile``: one cronbase drain (concurrency 100, one process) under pyinstrument.

The worker runs in this process so the profiler sees its event loop; the HTML goes next to the
results, the text summary into the report.
"""

from __future__ import annotations

import time
from pathlib import Path

from .cluster import Cluster
from .subjects import cronbase_subject
from .workloads import Settings


def run(cluster: Cluster, s: Settings, out: Path) -> str:
    from pyinstrument import Profiler

    url = cluster.create_database("cronbase_profile")
    cronbase_subject.setup(url)
    cronbase_subject.preload(url, s.jobs)
    app = cronbase_subject.make_app(url)[0]
    assert app.database_url
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    start = time.perf_counter()
    profiler.start()
    app.run_worker(burst=True, concurrency=100, install_signal_handlers=False)
    profiler.stop()
    elapsed = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile-drain.html").write_text(profiler.output_html())
    header = (
        f"{s.jobs:,} jobs in {elapsed:.2f}s under the profiler ({s.jobs / elapsed:,.0f} jobs/s)\n"
    )
    text = profiler.output_text(unicode=False, color=False, show_all=False, short_mode=False)
    return header + text
