"""What the hosts tier measured: one line per test, printed, and appended as JSON to
``CRONBASE_HOSTS_SUMMARY`` when set. ``python -m tests.hosts.figures FILE`` prints them all, as
``make test`` (and ``make hosts``) do at the end.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

SUMMARY_ENV = "CRONBASE_HOSTS_SUMMARY"


def scale() -> float:
    """CRONBASE_HOSTS_SCALE: 1 (the default, what ``make test`` runs) or more, for longer runs."""
    text = os.environ.get("CRONBASE_HOSTS_SCALE", "1")
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 20:
        raise ValueError(
            f"CRONBASE_HOSTS_SCALE must be a number above 0 and at most 20 (1 = make test's "
            f"scale), got {text!r}"
        )
    return value


SCALE = scale()


def scaled(full: int, *, least: int) -> int:
    """``full`` at scale 1, proportionally more or less (at least ``least``) otherwise."""
    return max(least, round(full * SCALE))


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def line(test: str, figures: dict[str, Any]) -> str:
    return f"hosts {test}: " + " ".join(f"{k}={_format(v)}" for k, v in figures.items())


def save(test: str, figures: dict[str, Any]) -> None:
    """Print the test's line (pytest shows it with -s, or with a failure) and append it to the
    summary file."""
    print(line(test, figures))
    path = os.environ.get(SUMMARY_ENV)
    if path:
        with Path(path).open("a") as summary:
            summary.write(json.dumps({"test": test, "scale": SCALE, "figures": figures}) + "\n")


def summarise(path: Path) -> str:
    try:
        rows = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    except FileNotFoundError:
        rows = []
    if not rows:
        return f"hosts tier: no figures in {path} (no test of tests/hosts ran to its end)"
    scales = sorted({row["scale"] for row in rows})
    lines = [f"hosts tier figures (CRONBASE_HOSTS_SCALE={', '.join(map(str, scales))})"]
    for row in rows:
        lines.append(f"  {row['test']}")
        lines += [f"    {name}: {_format(value)}" for name, value in row["figures"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1])))
