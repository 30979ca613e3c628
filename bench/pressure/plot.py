"""One PNG per scenario: a row of panels per metric (completions/s with each subject's offered
rate dashed, depth, pickup p99, claim p99, hot-table dead tuples and size), one line per
subject, the disturbance shaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PANELS = (
    ("completions/s", "completions_per_s", "log"),
    ("depth (jobs due, not started)", "max_depth", "symlog"),
    ("pickup p99 (ms)", "pickup_p99_ms", "log"),
    ("claim p99 (ms)", "claim_p99_ms", "log"),
    ("hot dead tuples", "hot_dead", "symlog"),
    ("hot tables (MiB)", "hot_total_mb", "linear"),
)


def scenario_png(results: dict[str, Any], key: str, path: Path) -> Path | None:
    """Draw scenario ``key``; None when no subject has samples for it (or no matplotlib)."""
    measured = [
        (entry["name"], entry["scenarios"][key])
        for entry in results["subjects"].values()
        if "rows" in entry.get("scenarios", {}).get(key, {})
    ]
    if not measured:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    scenario = results["scenarios"][key]
    start = scenario["clean"]
    end = start + scenario["disturbance"]
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(11, 2.6 * len(PANELS)), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, column, scale) in zip(axes, PANELS, strict=True):
        for i, (name, result) in enumerate(measured):
            rows = result["rows"]
            t = [r["t"] for r in rows]
            color = colors[i % len(colors)]
            ax.plot(t, [r[column] for r in rows], marker=".", color=color, label=name)
            if column == "completions_per_s":
                ax.plot(
                    t,
                    [r["offered_per_s"] for r in rows],
                    linestyle="--",
                    color=color,
                    alpha=0.6,
                    label=f"{name} offered",
                )
        ax.axvspan(start, end, color="red", alpha=0.1, label="disturbance")
        ax.set_ylabel(title)
        ax.set_yscale(scale)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize="x-small", ncol=2)
    axes[-1].set_xlabel("seconds")
    fig.suptitle(f"pressure: {key} ({results['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
