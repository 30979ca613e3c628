"""The Markdown report: the run's set-up, then per scenario the subjects side by side (clean,
during, after), the targets, each subject's hot tables at their peak and its 10 s samples."""

from __future__ import annotations

from typing import Any

from .config import TITLES

MIB = 1024 * 1024
PHASES = ("clean", "during", "after")
MARK = {True: "met", False: "MISSED", None: "n/a"}


def _n(v: float, digits: int = 0) -> str:
    return "-" if v != v else f"{v:,.{digits}f}"


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _header(results: dict[str, Any]) -> list[str]:
    c = results["config"]
    m = results["machine"]
    lines = [
        f"# Pressure benchmark, {results['date']}",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores; load average {results['load_before']}"
        f" before, {results['load_after']} after; commit {m['commit']};"
        f" {results['elapsed_seconds'] / 60:.0f} minutes",
        f"- PostgreSQL {results['postgres']}: its defaults (fsync and synchronous_commit on,"
        " autovacuum_naptime 60 s), max_connections 200; a fresh database per subject and"
        " scenario; subjects one at a time",
        f"- Offered load: {c['rate_fraction']:.0%} of each subject's clean capacity (best of"
        f" {c['capacity_drains']} burst drains of {results['capacity_jobs']:,} no-op jobs by"
        f" the same {c['workers']} worker processes), {c['overload_factor']:g}x it during the"
        f" overload; {c['producers']} producer processes, calls of max({c['batch']}, jobs/s per"
        f" producer / {c['max_calls']:g}) jobs, one statement each; 80% of"
        " calls immediate, 10% scheduled 5-30 s ahead, 10% failing their first attempt (retried"
        " by the subject after ~1 s)",
        "- pickup: due time to handler start, first attempts only; claim: the subject's own claim"
        f" statement timed by a probe {c['probe_rate']:g}x/s in a transaction rolled back; depth:"
        " jobs due and not started (from the reports, second by second); hot tables: dead tuples"
        " and pg_total_relation_size summed over the subject's hot tables",
        "",
        "| subject | worker set-up | hot tables | capacity, jobs/s (drains) |",
        "|---|---|---|---|",
    ]
    for entry in results["subjects"].values():
        hot = ", ".join(entry["hot_tables"]) if entry["hot_tables"] else "every table of its schema"
        if "capacity" in entry:
            capacity = f"{entry['capacity']:,.0f} ({', '.join(f'{d:,.0f}' for d in entry['capacity_drains'])})"
        else:
            capacity = f"not measured: {entry.get('unavailable', '?')}"
        lines.append(f"| {entry['name']} | {entry['setup']} | {hot} | {capacity} |")
    return lines


def _phase_table(results: dict[str, Any], key: str) -> list[str]:
    lines = [
        "| subject | phase | completions/s (offered; enqueued) | max depth | pickup p50 / p99 ms"
        " (worst 10 s) | claim p99 ms (worst) | hot dead tuples (peak) | hot MiB (peak) |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for entry in results["subjects"].values():
        result = entry.get("scenarios", {}).get(key)
        if result is None:
            continue
        if "failed" in result:
            lines.append(f"| {entry['name']} | failed: {result['failed']} | | | | | | |")
            continue
        for phase in PHASES:
            s = result["summary"].get(phase)
            if s is None:
                continue
            lines.append(
                f"| {entry['name']} | {phase} | {_n(s['completions_per_s'])}"
                f" ({_n(s['offered_per_s'])}; {_n(s['enqueued_per_s'])}) | {s['max_depth']:,} |"
                f" {_n(s['pickup_p50_ms'], 1)} / {_n(s['pickup_p99_ms'], 1)}"
                f" ({_n(s['worst_pickup_p99_ms'], 1)}) | {_n(s['claim_p99_ms'], 2)}"
                f" ({_n(s['worst_claim_p99_ms'], 2)}) | {s['hot_dead_peak']:,} |"
                f" {_n(s['hot_total_mb_peak'], 1)} |"
            )
    return lines


def _targets(results: dict[str, Any], key: str) -> list[str]:
    measured = [
        e for e in results["subjects"].values() if "targets" in e.get("scenarios", {}).get(key, {})
    ]
    if not measured:
        return []
    names = [t["target"] for t in measured[0]["scenarios"][key]["targets"]]
    lines = [
        "Targets (cronbase's; every subject is measured against them):",
        "",
        "| target | " + " | ".join(e["name"] for e in measured) + " |",
        "|---|" + "---|" * len(measured),
    ]
    for i, name in enumerate(names):
        cells = []
        for e in measured:
            t = e["scenarios"][key]["targets"][i]
            cells.append(f"**{MARK[t['ok']]}**: {t['measured']} (limit {t['limit']})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _hot_tables(entry: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Each hot table (for cronbase: each table whose size or dead tuples changed) at its peak
    over the whole scenario, with its indexes."""
    peaks: dict[str, dict[str, float]] = {}
    for s in result["summary"].values():
        for name, t in s["tables"].items():
            peak = peaks.setdefault(name, {})
            for k, v in t.items():
                peak[k] = max(peak.get(k, 0), v)
    rows = result["rows"]
    first = rows[0]["tables"] if rows else {}
    hot = entry["hot_tables"]
    lines = []
    for name, peak in sorted(peaks.items()):
        start = first.get(name, {})
        changed = peak["dead"] > 0 or peak["total_mb"] * MIB > start.get("total_bytes", 0) + 8192
        if (hot is not None and name not in hot) or (hot is None and not changed):
            continue
        indexes = ", ".join(
            f"{k.removeprefix('index ')} {v:,.1f}"
            for k, v in peak.items()
            if k.startswith("index ")
        )
        lines.append(
            f"| {entry['name']} | {name} | {peak['dead']:,.0f} | {peak['heap_mb']:,.1f} |"
            f" {peak['total_mb']:,.1f} | {indexes} |"
        )
    return lines


def _samples(entry: dict[str, Any], result: dict[str, Any]) -> list[str]:
    lines = [
        f"{entry['name']}:",
        "",
        "| t | phase | offered/s | enqueued/s (call p99 ms) | completions/s | depth (max) |"
        " pickup p50 / p99 ms | claim p99 ms | hot dead | hot MiB (heap + idx) | xmin age |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {_clock(r['t'])} | {r['phase']} | {_n(r['offered_per_s'])} |"
            f" {_n(r['enqueued_per_s'])} ({_n(r['enqueue_p99_ms'], 1)}) |"
            f" {_n(r['completions_per_s'])} | {r['depth']:,}"
            f" ({r['max_depth']:,}) | {_n(r['pickup_p50_ms'], 1)} / {_n(r['pickup_p99_ms'], 1)} |"
            f" {_n(r['claim_p99_ms'], 2)} | {r['hot_dead']:,} | {_n(r['hot_total_mb'], 1)}"
            f" ({_n(r['hot_heap_mb'], 1)} + {_n(r['hot_index_mb'], 1)}) | {r['xmin_age']:,} |"
        )
    return lines


def _cronbase_verdicts(results: dict[str, Any]) -> list[str]:
    """One line per scenario: which of its targets cronbase met."""
    entry = results["subjects"].get("cronbase")
    if entry is None:
        return []
    lines = ["", "cronbase against its targets:", ""]
    if "unavailable" in entry:
        return [*lines, f"- not measured: {entry['unavailable']}"]
    for key, result in entry.get("scenarios", {}).items():
        if "failed" in result:
            lines.append(f"- {key}: the scenario failed: {result['failed']}")
            continue
        verdicts = result["targets"]
        missed = [t["target"] for t in verdicts if t["ok"] is False]
        unmeasured = [t["target"] for t in verdicts if t["ok"] is None]
        lines.append(
            f"- {key}: {sum(t['ok'] is True for t in verdicts)} of {len(verdicts)} met"
            + (f"; MISSED: {'; '.join(missed)}" if missed else "")
            + (f"; not measured: {'; '.join(unmeasured)}" if unmeasured else "")
        )
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = _header(results) + _cronbase_verdicts(results)
    for key, s in results["scenarios"].items():
        lines += [
            "",
            f"## {key}: {TITLES[key]}",
            "",
            f"Clean {_clock(0)}-{_clock(s['clean'])}, disturbance"
            f" {_clock(s['clean'])}-{_clock(s['clean'] + s['disturbance'])}, recovery to"
            f" {_clock(s['clean'] + s['disturbance'] + s['recovery'])}. Figures per phase: means"
            " of the 10 s intervals (completions, offered, enqueued), pooled percentiles"
            " (worst interval's in brackets), peaks.",
            "",
            *_phase_table(results, key),
            "",
            *_targets(results, key),
        ]
        notes = []
        hot_lines = []
        samples = []
        for entry in results["subjects"].values():
            result = entry.get("scenarios", {}).get(key)
            if result is None or "failed" in result:
                continue
            for what, reason in result["unavailable"].items():
                notes.append(f"- {entry['name']}: {what} n/a: {reason}")
            if result["disturbance"]:
                d = result["disturbance"]
                notes.append(
                    f"- {entry['name']}: readers ran {d['scans']} scans, median"
                    f" {_n(d['scan_median_s'] or float('nan'), 2)} s, longest"
                    f" {_n(d['scan_max_s'] or float('nan'), 2)} s"
                    + (f"; errors: {'; '.join(d['errors'])}" if d["errors"] else "")
                )
            if result.get("warnings"):
                name, text = result["warnings"][0]
                notes.append(
                    f"- {entry['name']}: {len(result['warnings'])} warning(s), the first from"
                    f" {name}: {text.splitlines()[0] if text else ''}"
                )
            notes.append(
                f"- {entry['name']}: the workers finished the deferred jobs"
                f" {result['final_drain_seconds']:.0f} s after the producers stopped"
                if result["is_drained"]
                else f"- {entry['name']}: the workers had not finished the deferred jobs"
                f" {result['final_drain_seconds']:.0f} s after the producers stopped (the cap)"
            )
            hot_lines += _hot_tables(entry, result)
            samples += ["", *_samples(entry, result)]
        lines += ["", *notes, "", "Hot tables at their peak over the scenario (MiB):", ""]
        lines += [
            "| subject | table | dead tuples | heap | total | indexes |",
            "|---|---|---:|---:|---:|---|",
            *hot_lines,
            "",
            f"Samples every 10 s ({key}):",
            *samples,
        ]
    return "\n".join(lines) + "\n"
