"""Offer each design the same load, hold the horizon, sample: ``python -m bench.storage_trial``.

One fresh database per design on one cluster. A producer process inserts ``--rate`` jobs/s in
batches of 10; ``--workers`` processes claim 10 at a time, complete what they claimed in their
next claim, and poll every 5 ms when nothing came. After ``--warm`` seconds a session opens a
transaction, takes an xid and sits idle for ``--hold`` seconds; then ``--recover`` seconds.
Every ``--every`` seconds: jobs done per second, claim p50/p99 (timed by the workers), pickup
p99 (enqueue to claim), depth (enqueued minus done), and the hot tables' dead tuples.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue as queue_module
import statistics
import time
from typing import Any

import psycopg

from ..cluster import running_cluster
from ..harness import CTX
from . import designs


def producer(url: str, rate: float, stop: Any, out: Any) -> None:
    interval = 10 / rate
    made = 0
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        while not stop.is_set():
            wait = start + (made / 10) * interval - time.monotonic()
            if wait > 0:
                stop.wait(wait)
            elif wait < -1.0:  # the database fell behind: do not burst to catch up
                start, made = time.monotonic(), 0
                continue
            conn.execute(designs.ENQUEUE, (designs.payloads(10),)).fetchall()
            made += 10
            out.put(("made", 10))


# Every design reaches jobs by index only (the tickets design's functions say so themselves):
# a hash join over a seq scan of jobs, which the planner picks for small tables, would read every
# dead version a held horizon keeps, in every design alike.
INDEX_ONLY = "-c enable_seqscan=off -c enable_hashjoin=off -c enable_mergejoin=off"


def worker(url: str, design: str, name: str, stop: Any, out: Any) -> None:
    state = designs.Worker(name, design)
    claims: list[float] = []
    pickups: list[float] = []
    done = 0
    flushed = time.monotonic()
    with psycopg.connect(url, autocommit=True, options=INDEX_ONLY) as conn:
        while not stop.is_set():
            began = time.perf_counter()
            rows = state.claim(conn, 10)
            claims.append(time.perf_counter() - began)
            now = time.time()
            pickups.extend(now - json.loads(r[2])["t"] for r in rows)
            done += len(rows)
            if not rows:
                stop.wait(0.005)
            if time.monotonic() - flushed >= 0.5:
                out.put(("worker", done, claims, pickups))
                done, claims, pickups, flushed = 0, [], [], time.monotonic()
        state.claim(conn, 0)  # the last successes
    out.put(("worker", done, claims, pickups))


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def dead_tuples(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE n_dead_tup > 0"
    ).fetchall()
    return {name: int(n) for name, n in rows}


def trial(url: str, design: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(designs.SCHEMAS[design])
    stop, out = CTX.Event(), CTX.Queue()
    procs = [CTX.Process(target=producer, args=(url, args.rate, stop, out))]
    procs += [
        CTX.Process(target=worker, args=(url, design, f"w{k}", stop, out))
        for k in range(args.workers)
    ]
    for p in procs:
        p.start()
    samples: list[dict[str, Any]] = []
    made = done = 0
    holder: psycopg.Connection[Any] | None = None
    began = time.monotonic()
    total = args.warm + args.hold + args.recover
    try:
        with psycopg.connect(url, autocommit=True) as probe:
            next_sample = began + args.every
            window: dict[str, Any] = {"done": 0, "claims": [], "pickups": []}
            while time.monotonic() - began < total:
                t = time.monotonic() - began
                if holder is None and args.warm <= t < args.warm + args.hold:
                    holder = psycopg.connect(url)
                    holder.execute("SELECT txid_current()")  # an xid, held while idle
                if holder is not None and t >= args.warm + args.hold:
                    holder.rollback()
                    holder.close()
                    holder = None
                with contextlib.suppress(queue_module.Empty):
                    message = out.get(timeout=0.1)
                    if message[0] == "made":
                        made += message[1]
                    else:
                        done += message[1]
                        window["done"] += message[1]
                        window["claims"] += message[2]
                        window["pickups"] += message[3]
                if time.monotonic() >= next_sample:
                    if design in designs.MAINTAIN:
                        probe.execute(designs.MAINTAIN[design])
                    sample = {
                        "t": round(time.monotonic() - began),
                        "held": holder is not None,
                        "done_per_s": window["done"] / args.every,
                        "claim_p50_ms": 1000 * quantile(window["claims"], 0.5),
                        "claim_p99_ms": 1000 * quantile(window["claims"], 0.99),
                        "pickup_p99_ms": 1000 * quantile(window["pickups"], 0.99),
                        "depth": made - done,
                        "dead": dead_tuples(probe),
                    }
                    samples.append(sample)
                    print(
                        f"  {design:8} t={sample['t']:4}s {'HELD' if sample['held'] else '    '} "
                        f"done/s={sample['done_per_s']:7.0f} claim p50/p99="
                        f"{sample['claim_p50_ms']:6.2f}/{sample['claim_p99_ms']:7.2f} ms "
                        f"pickup p99={sample['pickup_p99_ms']:8.1f} ms depth={sample['depth']:6} "
                        f"dead={sum(sample['dead'].values()):8}",
                        flush=True,
                    )
                    window = {"done": 0, "claims": [], "pickups": []}
                    next_sample += args.every
    finally:
        if holder is not None:
            holder.close()
        stop.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return samples


def summary(design: str, samples: list[dict[str, Any]], args: argparse.Namespace) -> str:
    def mean(key: str, rows: list[dict[str, Any]]) -> float:
        values = [r[key] for r in rows if r[key] == r[key]]
        return statistics.fmean(values) if values else float("nan")

    clean = [s for s in samples if args.every * 2 <= s["t"] <= args.warm]
    held = [s for s in samples if s["held"]]
    last = held[-3:] if held else []
    return (
        f"| {design} | {mean('done_per_s', clean):,.0f} | {mean('done_per_s', last):,.0f} | "
        f"{mean('claim_p99_ms', clean):.2f} | {mean('claim_p99_ms', last):.2f} | "
        f"{mean('pickup_p99_ms', clean):.1f} | {mean('pickup_p99_ms', last):.1f} | "
        f"{max((s['depth'] for s in held), default=0):,} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storage_trial", description=__doc__)
    parser.add_argument("--designs", default="move,keyset,tickets")
    parser.add_argument("--rate", type=float, default=2000.0, help="jobs offered per second")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warm", type=float, default=30.0)
    parser.add_argument("--hold", type=float, default=120.0)
    parser.add_argument("--recover", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=5.0)
    args = parser.parse_args(argv)
    chosen = args.designs.split(",")
    lines = []
    with running_cluster({"max_connections": "100"}) as cluster:
        print(f"PostgreSQL {cluster.version}; {args.rate:.0f} jobs/s offered", flush=True)
        for design in chosen:
            url = cluster.create_database(f"trial_{design}")
            samples = trial(url, design, args)
            lines.append(summary(design, samples, args))
    print()
    print(
        "| design | done/s clean | done/s held (last 15 s) | claim p99 clean ms | held ms |"
        " pickup p99 clean ms | held ms | most depth held |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for line in lines:
        print(line)
    return 0
