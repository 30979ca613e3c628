"""From a scenario's samples to its figures: per phase (clean, during the disturbance, after
it) the completions against the offered rate, the deepest queue, pickup and claim
percentiles, and the hot tables at their peak; then the targets cronbase is held to, checked
for every subject alike.

The targets (bench/pressure/README.md, "Targets"):
- idle and readers, during the disturbance: the depth never above 2 s of offered load; pickup
  p99 under 100 ms in every 10 s interval; claim p99 within 2x of its clean value in every
  interval;
- overload: completions during it at 90% of the clean capacity or more; afterwards the backlog
  drains at 90% of the spare rate (capacity minus offered) or faster;
- every scenario: hot-table dead tuples come back down (their lowest after the end under half
  the peak, or under 1.5x the clean phase's most + 1,000) and their size grows, over the last 60 s, at no
  more than 1.5x the clean phase's rate + 50 KiB/s; and from 60 s after the end (the
  disturbance's end; for the overload, the moment its backlog has drained) every figure back
  to its clean value: completions >= 90% of offered and depth within 2 s of offered load or
  1.5x the clean phase's deepest in every interval, pickup p99 and claim p99 (pooled over those
  intervals) within 2x their clean values.
"""

from __future__ import annotations

import math
from typing import Any

from .collector import percentile
from .config import SAMPLE_SECONDS, PressureConfig, Scenario

MIB = 1024 * 1024
PICKUP_P99_MS = 100.0
KEEP_PACE_SECONDS = 2.0  # of offered load
CLAIM_FACTOR = 2.0
OVERLOAD_SHARE = 0.9  # of the clean capacity
DRAIN_SHARE = 0.9  # of the spare rate
BACK_AFTER = 60.0  # seconds
BACK_FACTOR = 2.0  # p99s within 2x their clean values
KEEP_UP = 0.9  # completions vs offered
DEAD_DOWN = 0.5  # of the peak
DEAD_CLEAN = 1.5  # x the clean phase's most, + 1,000
# A table that keeps finished jobs grows at the offered rate whatever happens (raw SQL's,
# pg-boss's with its 7-day retention): "bounded" is its growth back to the clean phase's rate
# by the end of the run, not a size that stops moving.
GROWTH_WINDOW = 60.0  # seconds: the end of the run
GROWTH_FACTOR = 1.5
GROWTH_SLACK = 50 / 1024  # MiB/s (50 KiB/s: a few pages a second of noise)


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v == v]


def _max(values: list[float]) -> float:
    finite = _finite(values)
    return max(finite) if finite else math.nan


def _mean(values: list[float]) -> float:
    finite = _finite(values)
    return sum(finite) / len(finite) if finite else math.nan


def _bins(rows: list[dict[str, Any]]) -> range:
    """The sample intervals (collector bin indexes) of consecutive rows."""
    first, last = rows[0]["t"], rows[-1]["t"]
    return range(round(first / SAMPLE_SECONDS) - 1, round(last / SAMPLE_SECONDS))


def summarize(result: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    """Per phase: completions/s and offered/s (means), enqueued/s, the deepest queue, pooled
    pickup p50/p99 and claim p99 with the worst interval's, the hot tables' peaks."""
    out: dict[str, Any] = {}
    for phase in ("clean", "during", "after"):
        rows = [r for r in result["rows"] if r["phase"] == phase]
        if not rows:
            continue
        pool = result["pooled"](_bins(rows))
        tables: dict[str, dict[str, float]] = {}
        for r in rows:
            for name, t in r["tables"].items():
                peak = tables.setdefault(name, {"dead": 0, "heap_mb": 0.0, "total_mb": 0.0})
                peak["dead"] = max(peak["dead"], t["dead"])
                peak["heap_mb"] = max(peak["heap_mb"], t["heap_bytes"] / MIB)
                peak["total_mb"] = max(peak["total_mb"], t["total_bytes"] / MIB)
                for index, size in t["indexes"].items():
                    key = f"index {index}"
                    peak[key] = max(peak.get(key, 0.0), size / MIB)
        out[phase] = {
            "samples": len(rows),
            "offered_per_s": _mean([r["offered_per_s"] for r in rows]),
            "enqueued_per_s": _mean([r["enqueued_per_s"] for r in rows]),
            "completions_per_s": _mean([r["completions_per_s"] for r in rows]),
            "max_depth": max(r["max_depth"] for r in rows),
            "pickup_p50_ms": percentile(pool["pickups"], 50) * 1000,
            "pickup_p99_ms": percentile(pool["pickups"], 99) * 1000,
            "claim_p50_ms": percentile(pool["claims"], 50) * 1000,
            "claim_p99_ms": percentile(pool["claims"], 99) * 1000,
            "worst_pickup_p99_ms": _max([r["pickup_p99_ms"] for r in rows]),
            "worst_claim_p99_ms": _max([r["claim_p99_ms"] for r in rows]),
            "hot_dead_peak": max(r["hot_dead"] for r in rows),
            "hot_total_mb_peak": max(r["hot_total_mb"] for r in rows),
            "hot_heap_mb_peak": max(r["hot_heap_mb"] for r in rows),
            "hot_index_mb_peak": max(r["hot_index_mb"] for r in rows),
            "xmin_age_peak": max(r["xmin_age"] for r in rows),
            "tables": tables,
        }
    return out


def _growth(rows: list[dict[str, Any]], since: float) -> float:
    """The hot tables' growth, MiB/s, from the first sample at or after ``since`` to the last
    (NaN with fewer than two)."""
    chosen = [r for r in rows if r["t"] >= since - 1e-6]
    if len(chosen) < 2:
        return math.nan
    first, last = chosen[0], chosen[-1]
    grown = float(last["hot_total_mb"]) - float(first["hot_total_mb"])
    return grown / (float(last["t"]) - float(first["t"]))


def _drained(result: dict[str, Any], scenario: Scenario, threshold: float) -> int | None:
    """The first second from the disturbance's end at which the depth is back under
    ``threshold``; None when it never is."""
    depths = result["depths"]
    for s in range(int(scenario.ended), min(len(depths), int(scenario.seconds))):
        if depths[s] <= threshold:
            return s
    return None


def targets(
    result: dict[str, Any], scenario: Scenario, capacity: float, config: PressureConfig
) -> list[dict[str, Any]]:
    """Each target: ``{"target", "measured", "limit", "ok"}``; ok None: not measured."""
    out: list[dict[str, Any]] = []
    summary = result["summary"]
    clean, during = summary.get("clean"), summary.get("during")
    rows = result["rows"]
    rate = config.rate_fraction * capacity
    if clean is None or during is None:
        return [{"target": "samples", "measured": "too few", "limit": "-", "ok": False}]

    def check(target: str, measured: str, limit: str, ok: bool | None) -> None:
        out.append({"target": target, "measured": measured, "limit": limit, "ok": ok})

    claim_clean = clean["claim_p99_ms"]
    pace = KEEP_PACE_SECONDS * rate
    if scenario.key in ("idle", "readers"):
        check(
            "keeps pace: depth during <= 2 s of offered load",
            f"{during['max_depth']:,} deepest",
            f"<= {pace:,.0f}",
            during["max_depth"] <= pace,
        )
        worst = during["worst_pickup_p99_ms"]
        check(
            "pickup p99 during < 100 ms (every 10 s interval)",
            f"{worst:,.1f} ms worst (pooled {during['pickup_p99_ms']:,.1f})",
            f"< {PICKUP_P99_MS:.0f} ms",
            worst < PICKUP_P99_MS if worst == worst else None,
        )
        worst_claim = during["worst_claim_p99_ms"]
        check(
            "claim p99 during within 2x of clean (every interval)",
            f"{worst_claim:,.2f} ms worst, clean {claim_clean:,.2f}",
            f"<= {CLAIM_FACTOR * claim_clean:,.2f} ms",
            worst_claim <= CLAIM_FACTOR * claim_clean if claim_clean == claim_clean else None,
        )
    threshold = max(pace, DEAD_CLEAN * clean["max_depth"])
    end = scenario.ended
    if scenario.key == "overload":
        done = during["completions_per_s"]
        check(
            "completions during the overload >= 90% of clean capacity",
            f"{done:,.0f} jobs/s",
            f">= {OVERLOAD_SHARE * capacity:,.0f}",
            done >= OVERLOAD_SHARE * capacity,
        )
        depths = result["depths"]
        backlog = depths[int(end) - 1] if len(depths) >= end else 0
        drained = _drained(result, scenario, threshold)
        spare = capacity - rate
        if backlog <= threshold:
            check("backlog drains at the spare rate", f"no backlog ({backlog:,})", "-", True)
            end_ref: float | None = end
        elif drained is None:
            check(
                "backlog drains at the spare rate",
                f"{backlog:,} not drained by the end",
                f">= {DRAIN_SHARE * spare:,.0f} jobs/s",
                False,
            )
            end_ref = None
        else:
            seconds = max(1, drained - int(end))
            speed = (backlog - depths[drained]) / seconds
            check(
                "backlog drains at the spare rate",
                f"{backlog:,} in {seconds} s: {speed:,.0f} jobs/s",
                f">= {DRAIN_SHARE * spare:,.0f} ({DRAIN_SHARE:.0%} of {spare:,.0f})",
                speed >= DRAIN_SHARE * spare,
            )
            end_ref = float(drained)
    else:
        end_ref = end
    last = rows[-1]
    peak_dead = max(r["hot_dead"] for r in rows if r["phase"] != "clean")
    limit_dead = max(DEAD_DOWN * peak_dead, DEAD_CLEAN * clean["hot_dead_peak"] + 1000)
    # Dead tuples saw-tooth between autovacuum rounds: the trough after the end says whether
    # vacuum could clean up again, the last sample only where in its round the run stopped.
    after = [r for r in rows if r["t"] > end + 1e-6]
    trough = min(r["hot_dead"] for r in after) if after else last["hot_dead"]
    check(
        "hot-table dead tuples come back down",
        f"{trough:,} at the lowest after the end, peak {peak_dead:,}, clean"
        f" {clean['hot_dead_peak']:,}",
        f"<= {limit_dead:,.0f}",
        trough <= limit_dead,
    )
    grown, clean_growth = (
        _growth(rows, rows[-1]["t"] - GROWTH_WINDOW),
        _growth([r for r in rows if r["phase"] == "clean"], 0.0),
    )
    limit_growth = GROWTH_FACTOR * clean_growth + GROWTH_SLACK
    check(
        "hot-table size: growth back to its clean rate",
        f"{grown * 1000:,.1f} KiB/s over the last {GROWTH_WINDOW:.0f} s, clean"
        f" {clean_growth * 1000:,.1f} (at {last['hot_total_mb']:,.1f} MiB)",
        f"<= {limit_growth * 1000:,.1f} KiB/s",
        grown <= limit_growth if grown == grown and clean_growth == clean_growth else None,
    )
    out.append(_back_to_clean(result, clean, end_ref, threshold, scenario))
    executions = result["executions"]
    never, twice = executions["never_completed"], executions["completed_twice"]
    # A final drain cut short by its cap leaves a backlog, not lost jobs: undecided then.
    decided = result["is_drained"] or twice > 0
    check(
        "every deferred job completed once",
        f"{executions['deferred']:,} deferred, {never:,}"
        + (" never" if result["is_drained"] else " not completed when the final drain ran out")
        + f", {twice:,} twice",
        "0, 0",
        (never == 0 and twice == 0) if decided else None,
    )
    return out


def _back_to_clean(
    result: dict[str, Any],
    clean: dict[str, Any],
    end_ref: float | None,
    depth_limit: float,
    scenario: Scenario,
) -> dict[str, Any]:
    target = "every figure back to clean 60 s after the end"
    if end_ref is None:
        return {
            "target": target,
            "measured": "the backlog never drained",
            "limit": "-",
            "ok": False,
        }
    # The samples taken 60 s or more after the end (each covers the 10 s before it).
    later = [r for r in result["rows"] if r["t"] >= end_ref + BACK_AFTER - 1e-6]
    if not later:
        return {
            "target": target,
            "measured": f"not measured: the run ends {scenario.seconds - end_ref:.0f} s after"
            " the end",
            "limit": "-",
            "ok": None,
        }
    pickup_limit = BACK_FACTOR * clean["pickup_p99_ms"]
    claim_limit = BACK_FACTOR * clean["claim_p99_ms"]
    misses = []
    # Throughput and depth interval by interval; the p99s pooled over those intervals (one
    # interval's p99 is a handful of jobs at low rates: a stray slow claim is not a trend).
    for r in later:
        if r["completions_per_s"] < KEEP_UP * r["offered_per_s"]:
            misses.append(f"{r['t']:.0f}s {r['completions_per_s']:,.0f}/s")
        if r["max_depth"] > depth_limit:
            misses.append(f"{r['t']:.0f}s depth {r['max_depth']:,}")
    pool = result["pooled"](_bins(later))
    pickup = percentile(pool["pickups"], 99) * 1000
    claim = percentile(pool["claims"], 99) * 1000
    if pickup > pickup_limit:
        misses.append(f"pickup p99 {pickup:,.1f} ms")
    if claim_limit == claim_limit and claim > claim_limit:
        misses.append(f"claim p99 {claim:,.2f} ms")
    return {
        "target": target,
        "measured": (
            f"{len(later)} interval(s) to {later[-1]['t']:.0f} s (pickup p99 {pickup:,.1f} ms,"
            f" claim p99 {claim:,.2f} ms): " + ("all back" if not misses else "; ".join(misses[:4]))
        ),
        "limit": (
            f">= {KEEP_UP:.0%} of offered, depth <= {depth_limit:,.0f}, pickup p99 <="
            f" {pickup_limit:,.1f} ms, claim p99 <= {claim_limit:,.2f} ms"
        ),
        "ok": not misses,
    }
