"""From samples to verdicts: least-squares slopes over the steady part, the checks with their
limits, the Markdown report and the plot.

The slope of a series is fitted over the steady samples (``SoakConfig.is_steady``: after the
retention window, outside the idle transaction and its recovery) as ``y = a + b*t + c*after``,
where ``after`` is 1 for samples after the idle transaction: ``b`` is the slope (reported per
hour), ``c`` the step the idle transaction left (a table it made larger stays larger: its free
space is reused, not returned). Without an idle transaction the fit is a plain line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import SoakConfig

MIB = 1024 * 1024

# The series whose slopes are fitted, and the limit each slope must stay under, per hour, as a
# fraction of the series' steady mean (size, p99s) or of the hot table's mean live tuples
# (dead tuples, which swing between autovacuums). Checked only when the steady samples span at
# least SLOPE_MIN_SPAN; shorter runs (CI's) report them and check the bounds below instead.
SERIES: dict[str, tuple[str, str, float]] = {
    # name: (sample key, unit, limit per hour)
    "hot table total size": ("hot_total_mb", "MiB", 0.25),
    "hot table dead tuples": ("hot_dead", "rows", 0.50),
    "enqueue p99": ("enqueue_p99_ms", "ms", 1.00),
    "claim p99": ("claim_p99_ms", "ms", 1.00),
    "pickup p99": ("pickup_p99_ms", "ms", 1.00),
}
SLOPE_MIN_SPAN = 600.0  # seconds
# p99 slopes under this many ms per hour pass whatever their mean (a 2 ms p99 that rises
# 1 ms/h is 50%/h and nothing to worry about).
P99_SLOPE_FLOOR_MS = 10.0
# Bounds every run checks, CI's included.
SIZE_GROWTH = 1.20  # in each steady segment, the last hot-table size <= first * 1.2 + 1 MiB
# After recovery, the median dead tuples <= 1.5x the most seen before the idle transaction
# (they swing between autovacuums; 1,000 rows of slack for tiny tables).
DEAD_RECOVERY = 1.5
DEAD_PER_JOB = 2  # dead tuples a job leaves in the hot table: its claim's update, its delete
NAPTIMES_LATE = 2  # how many autovacuum naptimes' churn a sample may see on a loaded machine
P99_LIMITS_MS = {"enqueue_p99_ms": 250.0, "claim_p99_ms": 250.0, "pickup_p99_ms": 1000.0}
KEEP_UP = 0.9  # steady throughput >= 90% of the offered rate
# A hot table that kept every job would gain live rows at the offered rate. The fitted slope of
# its live rows, and of its size, must stay under this share of that (size: at the table's mean
# bytes per live row). Unlike the relative slopes above, this decides at any length, CI's 2
# minutes included: a retention or cleanup leak is a slope of the order of the rate, flat is 0.
LEAK_SHARE = 0.10
# A sample's snapshot holder is listed from this age on (transactions): at 1,000 jobs/s a few
# seconds' worth; younger ones are the claims' and moves' own.
XMIN_SHOWN = 10_000


def _solve(a: list[list[float]], v: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(v)
    a = [row[:] for row in a]
    v = v[:]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot], v[col], v[pivot] = a[pivot], a[col], v[pivot], v[col]
        for r in range(n):
            if r != col:
                k = a[r][col] / a[col][col]
                a[r] = [x - k * y for x, y in zip(a[r], a[col], strict=True)]
                v[r] -= k * v[col]
    return [v[i] / a[i][i] for i in range(n)]


def fit(
    ts: Sequence[float], ys: Sequence[float], steps: Sequence[int]
) -> tuple[float, float, float]:
    """Least squares ``y = a + b*t + c*step``; returns ``(b, standard error of b, c)`` (``c`` 0
    when every step is equal; the error NaN with too few points)."""
    rows = [(1.0, t, float(s)) for t, s in zip(ts, steps, strict=True)]
    width = 3 if 0 < sum(steps) < len(steps) else 2
    a = [[sum(r[i] * r[j] for r in rows) for j in range(width)] for i in range(width)]
    v = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(width)]
    solution = _solve(a, v)
    unit = _solve(a, [float(i == 1) for i in range(width)])  # column 1 of (X'X)^-1
    if solution is None or unit is None:
        return math.nan, math.nan, math.nan
    residuals = [
        y - sum(c * x for c, x in zip(solution, r, strict=False))
        for r, y in zip(rows, ys, strict=True)
    ]
    free = len(rows) - width
    error = math.sqrt(sum(e * e for e in residuals) / free * unit[1]) if free > 0 else math.nan
    return solution[1], error, (solution[2] if width == 3 else 0.0)


def _steady(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in samples if s["steady"]]


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if v == v]


def slopes(config: SoakConfig, samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    steady = _steady(samples)
    idle = config.idle
    out = []
    span = (steady[-1]["t"] - steady[0]["t"]) if len(steady) >= 2 else 0.0
    mean_live = sum(s["hot_live"] for s in steady) / len(steady) if steady else math.nan
    for name, (key, unit, limit) in SERIES.items():
        points = [(s["t"], s[key]) for s in steady if s[key] == s[key]]
        if len(points) < 3:
            out.append({"series": name, "unit": unit, "slope_per_hour": math.nan, "ok": None})
            continue
        ts = [t / 3600 for t, _ in points]
        ys = [y for _, y in points]
        after = [int(idle is not None and t > idle[1]) for t, _ in points]
        b, error, c = fit(ts, ys, after)
        mean = sum(ys) / len(ys)
        base = mean_live if key == "hot_dead" else mean
        relative = b / base if base else math.nan
        allowed = limit * base
        if unit == "ms":
            allowed = max(allowed, P99_SLOPE_FLOOR_MS)
        decisive = span >= SLOPE_MIN_SPAN
        out.append(
            {
                "series": name,
                "unit": unit,
                "samples": len(points),
                "span_s": span,
                "mean": mean,
                "slope_per_hour": b,
                "error_per_hour": error,
                "relative_per_hour": relative,
                "step_after_idle": c,
                "limit_per_hour": allowed,
                # Noise alone must rarely fail a run: a slope fails when it is over its limit
                # and more than two standard errors above zero.
                "ok": not (b > allowed and b > 2 * error) if decisive else None,
            }
        )
    return out


def checks(
    config: SoakConfig,
    samples: list[dict[str, Any]],
    executions: dict[str, int],
    ticks: dict[str, int],
    rate: float,
    fitted: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Every verdict: (check, measured, limit, ok); ok None means informational."""
    out: list[dict[str, Any]] = []

    def check(name: str, measured: str, limit: str, ok: bool | None) -> None:
        out.append({"check": name, "measured": measured, "limit": limit, "ok": ok})

    e = executions
    check(
        "every job ran exactly once",
        f"{e['deferred']:,} deferred, {e['lost']:,} never ran, {e['twice']:,} ran twice or more,"
        f" {e['unknown']:,} unknown",
        "0 lost, 0 twice",
        e["lost"] == 0 and e["twice"] == 0 and e["unknown"] == 0,
    )
    check(
        "every schedule slot fired once",
        f"{ticks['fired']} slots, {ticks['duplicates']} duplicates",
        f">= {ticks['expected']} slots, 0 duplicates",
        ticks["fired"] >= ticks["expected"] and ticks["duplicates"] == 0,
    )
    steady = _steady(samples)
    if not steady:
        check("steady samples", "none", ">= 1", False)
        return out
    ran = sum(s["ran_per_s"] for s in steady) / len(steady)
    check(
        "the workers keep up (steady samples)",
        f"{ran:,.0f} jobs/s ran of {rate:,.0f} offered",
        f">= {KEEP_UP:.0%}",
        ran >= KEEP_UP * rate,
    )
    idle = config.idle
    segments = [steady]
    if idle is not None:
        segments = [
            [s for s in steady if s["t"] <= idle[0]],
            [s for s in steady if s["t"] > idle[1]],
        ]
    for label, segment in zip(("before the idle transaction", "after it"), segments, strict=False):
        if len(segment) < 2:
            continue
        first, last = segment[0]["hot_total_mb"], segment[-1]["hot_total_mb"]
        check(
            f"hot table size bounded {label if idle else ''}".strip(),
            f"{first:,.1f} -> {last:,.1f} MiB (t {segment[0]['t']:.0f}-{segment[-1]['t']:.0f} s)",
            f"<= x{SIZE_GROWTH} + 1 MiB",
            last <= first * SIZE_GROWTH + 1.0,
        )
    if idle is not None:
        before = [s["hot_dead"] for s in segments[0]]
        during = [s["hot_dead"] for s in samples if idle[0] < s["t"] <= config.recovered]
        after = sorted(s["hot_dead"] for s in segments[1])
        if before and during and after:
            peak = max(during)
            check(
                "the idle transaction held dead tuples back",
                f"peak {peak:,} during it, {max(before):,} at most before",
                "peak > before",
                peak > max(before),
            )
            median = after[len(after) // 2]
            # A sample's dead tuples depend on how long ago autovacuum last ran: up to one
            # naptime's churn (two a job: the claim's update, the completion's delete), and on a
            # machine whose cores are busy up to two: the launcher wakes each naptime, but its
            # worker starts late and its pass takes longer (a loaded CI run failed on 3,613
            # against one naptime's 3,600; another on 2,958 against 2,814 when the samples
            # moved from 2 s to 5 s after each run). Not recovering is a median near the peak.
            churn = DEAD_PER_JOB * rate * config.autovacuum_naptime * NAPTIMES_LATE
            limit = max(DEAD_RECOVERY * max(before) + 1000, churn)
            check(
                "dead tuples recover after it",
                f"median {median:,} after recovery",
                f"<= {DEAD_RECOVERY}x the most before + 1,000, or {NAPTIMES_LATE} naptimes' churn ({limit:,.0f})",
                median <= limit,
            )
    for key, limit in P99_LIMITS_MS.items():
        worst = max(_finite([s[key] for s in steady]), default=math.nan)
        check(
            f"{key.split('_')[0]} p99 bounded (steady samples)",
            f"{worst:,.1f} ms at worst",
            f"<= {limit:,.0f} ms",
            worst <= limit,
        )
    for name, measured, limit, ok in leak_checks(config, steady, rate):
        check(name, measured, limit, ok)
    for f in fitted:
        if f.get("samples") is None:
            check(f"{f['series']} slope", "too few steady samples", "-", None)
            continue
        check(
            f"{f['series']} slope",
            f"{f['slope_per_hour']:+,.2f} ± {f['error_per_hour']:,.2f} {f['unit']}/h"
            f" ({f['relative_per_hour']:+.1%}/h of "
            f"{'mean live tuples' if f['unit'] == 'rows' else 'its mean'};"
            f" step after idle {f['step_after_idle']:+,.1f})",
            f"<= {f['limit_per_hour']:,.1f} {f['unit']}/h, or within 2 standard errors of 0"
            + ("" if f["ok"] is not None else f" (checked from {SLOPE_MIN_SPAN / 60:.0f} min)"),
            f["ok"],
        )
    return out


def leak_checks(
    config: SoakConfig, steady: list[dict[str, Any]], rate: float
) -> list[tuple[str, str, str, bool]]:
    """The hot table's live rows and size, fitted over the steady samples (with the step the idle
    transaction leaves), against LEAK_SHARE of what keeping every job would add. A slope fails
    when it is over its limit and more than 2 standard errors above 0 (or the error is unknown)."""
    if len(steady) < 3 or rate <= 0:
        return []
    idle = config.idle
    ts = [s["t"] / 60 for s in steady]  # minutes
    after = [int(idle is not None and s["t"] > idle[1]) for s in steady]
    live = [float(s["hot_live"]) for s in steady]
    size = [float(s["hot_total_mb"]) for s in steady]
    mean_live = sum(live) / len(live)
    mib_per_row = (sum(size) / len(size)) / mean_live if mean_live > 0 else math.nan
    rows_per_min = rate * 60
    out = []
    for name, ys, limit, unit, digits in (
        ("hot table live rows: no leak", live, LEAK_SHARE * rows_per_min, "rows", 0),
        ("hot table size: no leak", size, LEAK_SHARE * rows_per_min * mib_per_row, "MiB", 3),
    ):
        b, error, _ = fit(ts, ys, after)
        significant = math.isnan(error) or b > 2 * error
        out.append(
            (
                name,
                f"{b:+,.{digits}f} ± {error:,.{digits}f} {unit}/min over {len(ys)} steady samples",
                f"<= {limit:,.{digits}f} {unit}/min ({LEAK_SHARE:.0%} of keeping every job at"
                f" {rate:,.0f} jobs/s), or within 2 standard errors of 0",
                not (b > limit and significant) and not math.isnan(b),
            )
        )
    return out


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _ms(v: float) -> str:
    return "-" if v != v else f"{v:,.1f}"


def markdown(result: dict[str, Any]) -> str:
    c = result["config"]
    samples = result["samples"]
    m = result["machine"]
    lines = [
        f"# cronbase soak, {result['date']}",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores; load average {result['load_before']} before,"
        f" {result['load_after']} after; commit {m['commit']}",
        f"- PostgreSQL {result['postgres']} (fsync on, synchronous_commit on, autovacuum_naptime"
        f" {result['autovacuum_naptime']} s, otherwise defaults)",
        f"- Capacity (best of {len(result['capacity_drains'])} burst drains of"
        f" {c['capacity_jobs']:,} jobs, {c['workers']} workers x concurrency {c['concurrency']}):"
        f" {result['capacity']:,.0f} jobs/s"
        f" ({', '.join(f'{d:,.0f}' for d in result['capacity_drains'])}); offered"
        f" {result['rate']:,.0f} jobs/s ({c['rate_fraction']:.0%}"
        + (f", capped at {c['max_rate']:,.0f}" if c["max_rate"] else "")
        + f") by {c['producers']} producer(s) in calls of {c['batch']}",
        f"- {c['minutes']:g} minutes, a sample every {result['sample_seconds']:g} s; retention"
        f" window {result['window']:g} s (pruned every {result['retention_interval']:g} s);"
        f" a schedule every {c['schedule_every']} s; "
        + (
            f"idle-in-transaction session {_clock(result['idle'][0])}-{_clock(result['idle'][1])}"
            f", recovery until {_clock(result['recovered'])}"
            if result["idle"]
            else "no idle transaction"
        ),
        f"- claim p99: the workers' claim statement timed by a probe ({c['probe_rate']:g}/s,"
        " rolled back);"
        " enqueue p99: each producer call; pickup: defer to handler start",
        "",
        f"Hot table `{result['hot_table']}` (with its partitions); `all` is every table of the"
        " schema. Steady samples (after the window, outside the idle transaction and its"
        " recovery) are marked *.",
        "",
        "| t | hot MiB (table + idx) | live | dead | last autovacuum | all MiB | xmin age"
        " | enqueue p99 ms | claim p99 ms | pickup p99 ms | ran/s | enqueued/s | load | |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in samples:
        auto = s["hot_last_autovacuum"]
        lines.append(
            f"| {_clock(s['t'])} | {s['hot_total_mb']:,.1f} ({s['hot_table_mb']:,.1f} +"
            f" {s['hot_index_mb']:,.1f}) | {s['hot_live']:,} | {s['hot_dead']:,} |"
            f" {'-' if auto is None else _clock(auto)} | {s['all_total_mb']:,.1f} |"
            f" {s['xmin_age']:,} | {_ms(s['enqueue_p99_ms'])} | {_ms(s['claim_p99_ms'])} |"
            f" {_ms(s['pickup_p99_ms'])} | {s['ran_per_s']:,.0f} | {s['enqueued_per_s']:,.0f} |"
            f" {s['load']:.1f} | {s['note']} |"
        )
    held = [s for s in samples if s.get("xmin_holder") and s["xmin_age"] >= XMIN_SHOWN]
    if held:
        lines += ["", f"Sessions holding a snapshot {XMIN_SHOWN:,} transactions old or more:", ""]
        lines += [f"- {_clock(s['t'])}: {s['xmin_age']:,}: {s['xmin_holder']}" for s in held]
    lines += ["", "| check | measured | limit | |", "|---|---|---|---|"]
    for ch in result["checks"]:
        mark = {True: "ok", False: "FAILED", None: "info"}[ch["ok"]]
        lines.append(f"| {ch['check']} | {ch['measured']} | {ch['limit']} | {mark} |")
    lines += ["", "Every table at the window and at the end (MiB, rows):", ""]
    lines += [
        "| table | partitions | MiB at window | MiB at end | live | dead |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    first = next((s for s in samples if s["steady"]), samples[0] if samples else None)
    if first is not None:
        last = samples[-1]
        for name, row in last["tables"].items():
            before = first["tables"].get(name, {}).get("total_bytes", 0) / MIB
            lines.append(
                f"| {name} | {row['partitions']} | {before:,.2f} | {row['total_bytes'] / MIB:,.2f}"
                f" | {row['live']:,} | {row['dead']:,} |"
            )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> bool:
    """The series over time, with the window and the idle transaction marked; False when
    matplotlib is not installed (the project's .venv, where CI runs the soak)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    samples = result["samples"]
    t = [s["t"] / 60 for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(10, 12), sharex=True)
    panels = [
        (
            "size (MiB)",
            [
                ("hot table", "hot_total_mb"),
                ("hot indexes", "hot_index_mb"),
                ("all tables", "all_total_mb"),
            ],
            False,
        ),
        ("tuples", [("hot live", "hot_live"), ("hot dead", "hot_dead")], False),
        (
            "p99 (ms)",
            [("enqueue", "enqueue_p99_ms"), ("claim", "claim_p99_ms"), ("pickup", "pickup_p99_ms")],
            True,
        ),
        ("jobs/s", [("ran", "ran_per_s"), ("enqueued", "enqueued_per_s")], False),
    ]
    for ax, (title, series, log) in zip(axes, panels, strict=True):
        for label, key in series:
            ax.plot(t, [s[key] for s in samples], marker=".", label=label)
        ax.set_ylabel(title)
        if log:
            ax.set_yscale("log")
        ax.axvline(
            result["window"] / 60, color="grey", linestyle="--", label="retention window reached"
        )
        if result["idle"]:
            a, b = result["idle"]
            ax.axvspan(a / 60, b / 60, color="red", alpha=0.12, label="idle in transaction")
            ax.axvline(result["recovered"] / 60, color="grey", linestyle=":", label="recovered")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("minutes")
    fig.suptitle(f"cronbase soak {result['date']}: {result['rate']:,.0f} jobs/s offered")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
