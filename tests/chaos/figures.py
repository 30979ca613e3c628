"""What each chaos scenario measured, as one line per scenario: printed, and appended as JSON to
``CRONBASE_CHAOS_SUMMARY`` when set. ``python -m tests.chaos.figures FILE`` prints the table
``make chaos`` shows at the end.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SUMMARY_ENV = "CRONBASE_CHAOS_SUMMARY"


@dataclass
class Figures:
    """One scenario's figures. ``lost``, ``duplicate_effects``, ``stuck`` and ``worker_exits``
    must be 0; the rest say how hard the scenario hit (re-runs are expected, not failures)."""

    scenario: str
    scale: float
    jobs: int = 0
    kills: int = 0
    restarts: int = 0
    stops: int = 0
    reruns: int = 0
    lost: int = 0
    duplicate_effects: int = 0
    missing_effects: int = 0
    stuck: int = 0
    worker_exits: int = 0
    drain_seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        notes = "".join(f" {name}={value}" for name, value in self.notes.items())
        return (
            f"chaos {self.scenario}: jobs={self.jobs} kills={self.kills} "
            f"restarts={self.restarts} stops={self.stops} re-runs={self.reruns} "
            f"lost={self.lost} duplicate-effects={self.duplicate_effects} "
            f"missing-effects={self.missing_effects} stuck={self.stuck} "
            f"worker-exits={self.worker_exits} drain={self.drain_seconds:.1f}s{notes}"
        )

    def save(self) -> None:
        """Print the line (pytest shows it with -s, or with a failure) and append it to the
        summary file."""
        print(self.line())
        path = os.environ.get(SUMMARY_ENV)
        if path:
            with Path(path).open("a") as summary:
                summary.write(json.dumps(asdict(self)) + "\n")


COLUMNS = [
    ("scenario", "scenario", "<"),
    ("jobs", "jobs", ">"),
    ("kills", "kills", ">"),
    ("restarts", "restarts", ">"),
    ("stops", "stops", ">"),
    ("reruns", "re-runs", ">"),
    ("lost", "lost", ">"),
    ("duplicate_effects", "dup. effects", ">"),
    ("missing_effects", "missing effects", ">"),
    ("stuck", "stuck", ">"),
    ("worker_exits", "worker exits", ">"),
    ("drain_seconds", "drain s", ">"),
]


def summarise(path: Path) -> str:
    """The summary file as a table, with each scenario's notes under it."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        rows = []
    if not rows:
        return f"chaos tier: no figures in {path} (no scenario ran to its end)"
    cells = [
        [
            f"{row[key]:.1f}" if isinstance(row[key], float) else str(row[key])
            for key, _, _ in COLUMNS
        ]
        for row in rows
    ]
    widths = [
        max(len(title), *(len(line[i]) for line in cells))
        for i, (_, title, _) in enumerate(COLUMNS)
    ]

    def render(values: list[str]) -> str:
        return "  ".join(
            f"{value:{align}{width}}"
            for value, width, (_, _, align) in zip(values, widths, COLUMNS, strict=True)
        )

    scales = sorted({row["scale"] for row in rows})
    lines = [
        f"chaos tier figures (CRONBASE_CHAOS_SCALE={', '.join(map(str, scales))})",
        render([title for _, title, _ in COLUMNS]),
    ]
    lines += [render(line) for line in cells]
    for row in rows:
        if row["notes"]:
            notes = ", ".join(f"{name}={value}" for name, value in row["notes"].items())
            lines.append(f"  {row['scenario']}: {notes}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1])))
