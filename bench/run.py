"""Run every workload on a private PostgreSQL, repeat, keep medians, print Markdown, write JSON.

``python -m bench`` (``make bench`` sets up ``bench/.venv`` first). ``--quick`` is a smoke run of
a minute or two; ``--repeats``, ``--jobs`` and ``--only`` narrow a run; ``--sync-commit-off``
adds a second, labelled pass with ``synchronous_commit=off``; at the end one cronbase drain
runs under pyinstrument (``--no-profile`` skips it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

from . import bigtable, fairness, flow, harness, report, supervised, workflows, workloads
from .cluster import Cluster, running_cluster
from .machine import machine
from .subjects import (
    bullmq_subject,
    cronbase_sql,
    cronbase_subject,
    pgqueuer_subject,
    procrastinate_subject,
    raw,
)
from .workloads import Measurement, Settings

HERE = Path(__file__).resolve().parent
SUBJECTS: tuple[ModuleType, ...] = (
    raw,
    cronbase_subject,
    pgqueuer_subject,
    procrastinate_subject,
    bullmq_subject,
)
# pgqueuer: (PgQueuer instances per process, dequeue batch size). "defaults" is one instance
# with run()'s defaults; "tuned" are the two best of a sweep over 1/2/5 instances x batch
# 10/50/100 at 1 and 2 processes (bench/README.md); pgqueuer's own benchmark tool also runs
# several dequeuers per process.
PGQ_DEFAULTS = (1, 10)
PGQ_TUNED = ((1, 100), (2, 100))

Step = tuple[str, str, Callable[[], list[Measurement]]]


def steps(urls: dict[str, str], s: Settings, only: set[str]) -> list[Step]:
    """(workload, name, run) for one repeat, in the order they run."""
    out: list[Step] = []

    def add(workload: str, name: str, fn: Callable[[], Measurement | list[Measurement]]) -> None:
        if not only or workload in only:
            out.append((workload, name, lambda: _as_list(fn())))

    for subject in SUBJECTS:
        url = urls[subject.NAME]
        add(
            "enqueue",
            f"{subject.NAME} single",
            lambda m=subject, u=url: workloads.enqueue_single(m, u, s),
        )
        add(
            "enqueue",
            f"{subject.NAME} bulk",
            lambda m=subject, u=url: workloads.enqueue_bulk(m, u, s),
        )
    add("enqueue", "raw COPY", lambda: workloads.enqueue_bulk(raw, urls[raw.NAME], s, copy=True))
    cb_url = urls[cronbase_subject.NAME]
    add("enqueue", "cronbase SQL single", lambda: workloads.enqueue_single(cronbase_sql, cb_url, s))
    add("enqueue", "cronbase SQL bulk", lambda: workloads.enqueue_bulk(cronbase_sql, cb_url, s))
    add("enqueue", "cronbase NOTIFY count", lambda: notify_count(urls[cronbase_subject.NAME], s))

    def drain(m: ModuleType, config: Any, procs: int, label: str, batch: int) -> None:
        url = urls[cronbase_subject.NAME] if m is cronbase_sql else urls[m.NAME]
        add(
            "drain",
            f"{m.NAME} {label} x{procs}",
            lambda: workloads.drain(m, url, s, config, procs, label, batch=batch),
        )

    # "batch" is what one claim asks for: cronbase claims as many jobs as it has free slots
    # (its concurrency), pgqueuer its dequeue batch size, procrastinate one job per fetch.
    for batch in (1, 10, 100):
        for procs in (1, 2) if batch < 100 else (1, 2, 4):
            drain(raw, batch, procs, f"batch {batch}", batch)
    drain(cronbase_sql, 10, 1, "batch 10", 10)
    for procs in (1, 2):
        drain(cronbase_sql, 100, procs, "batch 100", 100)
    drain(cronbase_subject, 10, 1, "concurrency 10 (default)", 10)
    for procs in (1, 2, 4):
        drain(cronbase_subject, 100, procs, "concurrency 100", 100)
    # The same drain run by the supervisor (cronbase worker --processes N): what it costs.
    for procs in (1, 2, 4):
        add(
            "drain",
            f"cronbase worker --processes {procs}",
            lambda procs=procs: supervised.drain(cb_url, s, procs),
        )
    add(
        "drain",
        "cronbase worker --processes 2 --metrics-port",
        lambda: supervised.drain(cb_url, s, 2, metrics=True),
    )
    drain(pgqueuer_subject, PGQ_DEFAULTS, 1, "defaults (1 x batch 10)", PGQ_DEFAULTS[1])
    for managers, batch in PGQ_TUNED:
        for procs in (1, 2, 4) if managers == 1 else (1, 2):
            label = f"tuned ({managers} x batch {batch})"
            drain(pgqueuer_subject, (managers, batch), procs, label, batch)
    drain(procrastinate_subject, 10, 1, "concurrency 10", 1)
    # BullMQ claims one job per call (batch 1) on one connection per worker, whatever its
    # concurrency (jobs in flight): 100 is measured to show that it does not help.
    for concurrency, procs in ((10, 1), (10, 2), (100, 1)):
        drain(bullmq_subject, concurrency, procs, f"concurrency {concurrency}", 1)

    for subject in SUBJECTS:
        add("latency", subject.NAME, lambda m=subject: workloads.latency(m, urls[m.NAME], s))
    cb = urls[cronbase_subject.NAME]
    add("flow", "cronbase 1,000 keys, key_concurrency=1", lambda: flow.keys(cb, s, "keyed"))
    add("flow", "cronbase 1,000 keys, no limit", lambda: flow.keys(cb, s, "free"))
    add("flow", "cronbase rate_limit=100/second", lambda: flow.rate(cb, s))
    for procs in (1, 2):
        for task in ("fair", "fifo"):
            add(
                "fairness",
                f"cronbase a then b, {task}, x{procs}",
                lambda t=task, p=procs: fairness.starvation(cb, s, t, p),
            )
    add("fairness", "cronbase 1,000 keys, fair", lambda: fairness.keys(cb, s, "fair"))
    add("fairness", "cronbase 1,000 keys, plain", lambda: fairness.keys(cb, s, "fifo"))
    add("workflow", "cronbase 10,000 no-op jobs", lambda: workflows.plain(cb, s))
    add("workflow", "cronbase group of 10,000 then a callback", lambda: workflows.fan_in(cb, s))
    add("workflow", "cronbase chain of 200", lambda: workflows.chain(cb, s))
    return out


def _as_list(result: Measurement | list[Measurement]) -> list[Measurement]:
    return result if isinstance(result, list) else [result]


def notify_count(url: str, s: Settings) -> Measurement:
    """Notifications one LISTENer gets per defer_many call: the statement sends one per queue,
    so 1, however many jobs the call holds."""
    calls = 5
    cronbase_subject.reset(url)
    app = cronbase_subject.make_app(url)[0]
    with psycopg.connect(url, autocommit=True) as listener, app:
        listener.execute(f"LISTEN {app.channel}")
        noop = app.tasks["noop"]
        for _ in range(calls):
            noop.defer_many([{"n": i} for i in range(s.bulk_chunk)])
        got = list(listener.notifies(timeout=1.0))
    return Measurement(
        "enqueue",
        "cronbase",
        f"NOTIFYs per defer_many of {s.bulk_chunk} jobs",
        len(got) / calls,
        "notifications",
    )


def big_table(cluster: Cluster, s: Settings) -> list[Measurement]:
    url = cluster.create_database("cronbase_big")
    cronbase_subject.setup(url)
    out: list[Measurement] = []
    for _ in range(s.repeats):
        out += bigtable.measure(url, s, "empty table")
    seconds = bigtable.fill(url, s)
    print(
        f"  big table: {s.big_finished:,} finished + {s.big_future:,} future rows in {seconds:.0f}s"
    )
    label = f"{s.big_finished // 1000:,}k finished + {s.big_future // 1000:,}k future rows"
    for _ in range(s.repeats):
        out += bigtable.measure(url, s, label)
    return out


def run_pass(cluster: Cluster, s: Settings, only: set[str], label: str) -> list[dict[str, Any]]:
    urls = {}
    for subject in SUBJECTS:
        urls[subject.NAME] = cluster.create_database(subject.__name__.rsplit(".", 1)[-1])
        subject.setup(urls[subject.NAME])
    plan = steps(urls, s, only)
    values: dict[tuple[str, str, str, str], list[float]] = {}
    extras: dict[tuple[str, str, str, str], list[Any]] = {}
    order: list[tuple[str, str, str, str]] = []

    def record(ms: list[Measurement]) -> None:
        for m in ms:
            key = (m.workload, m.system, m.config, m.unit)
            if key not in values:
                order.append(key)
            values.setdefault(key, []).append(m.value)
            extras.setdefault(key, []).append(m.extra)

    for rep in range(1, s.repeats + 1):
        for workload, name, fn in plan:
            start = time.monotonic()
            ms = fn()
            record(ms)
            shown = ", ".join(f"{m.value:,.1f} {m.unit}" for m in ms)
            print(
                f"  [{label} {rep}/{s.repeats}] {workload}: {name}: {shown} ({time.monotonic() - start:.1f}s)",
                flush=True,
            )
    if not only or "big table" in only:
        record(big_table(cluster, s))
    return [
        {
            "pass": label,
            "workload": k[0],
            "system": k[1],
            "config": k[2],
            "unit": k[3],
            "values": values[k],
            "median": harness.median(values[k]),
            "extra": extras[k],
        }
        for k in order
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small smoke run (1 repeat)")
    parser.add_argument("--repeats", type=int, help="repeats per figure (default 3, quick 1)")
    parser.add_argument("--jobs", type=int, help="jobs per enqueue/drain run (default 20000)")
    parser.add_argument(
        "--fair-jobs", type=int, help="tenant a's backlog in the fairness run (default 100000)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["enqueue", "drain", "latency", "big table", "flow", "fairness", "workflow"],
        help="run only these workloads (repeatable)",
    )
    parser.add_argument(
        "--sync-commit-off",
        action="store_true",
        help="also run everything again with synchronous_commit=off (labelled)",
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="skip profiling a cronbase drain at the end"
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "results", help="folder for the JSON and Markdown"
    )
    args = parser.parse_args(argv)

    s = Settings()
    if args.quick:
        s = Settings(
            jobs=3_000,
            repeats=1,
            enqueue_cap=3.0,
            drain_cap=8.0,
            latency_seconds=2.0,
            big_finished=100_000,
            big_future=10_000,
            claim_samples=100,
            fair_jobs=5_000,
        )
    if args.repeats:
        s.repeats = args.repeats
    if args.jobs:
        s.jobs = args.jobs
    if args.fair_jobs:
        s.fair_jobs = args.fair_jobs
    only = set(args.only or [])

    started = time.monotonic()
    when = dt.datetime.now(dt.UTC)
    rows: list[dict[str, Any]] = []
    profile_text = ""
    with running_cluster() as cluster:
        server = {
            "version": cluster.version,
            "binaries": str(cluster.bin_dir),
            "fsync": cluster.show("fsync"),
            "synchronous_commit": cluster.show("synchronous_commit"),
            "shared_buffers": cluster.show("shared_buffers"),
        }
        print(
            f"PostgreSQL {cluster.version} from {cluster.bin_dir} in {cluster.folder}", flush=True
        )
        rows += run_pass(cluster, s, only, "durable")
        if args.sync_commit_off:
            cluster.set("synchronous_commit", "off")
            rows += run_pass(cluster, s, only, "synchronous_commit=off")
            cluster.set("synchronous_commit", "on")
        if not args.no_profile:
            from . import profile

            profile_text = profile.run(cluster, s, args.out)
    elapsed = time.monotonic() - started

    result = {
        "date": when.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed, 1),
        "machine": machine(),
        "postgres": server,
        "settings": s.__dict__,
        "measurements": rows,
    }
    result["targets"] = report.targets(rows)
    markdown = report.markdown(result)
    if profile_text:
        markdown += "\n## Profile of one cronbase drain\n\n```\n" + profile_text + "\n```\n"
    path = report.write_results(args.out, "bench", when, result, markdown)
    print(f"wrote {path} and .md ({elapsed:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
