"""``python -m bench.pressure`` (``make pressure``): see bench/pressure/README.md."""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
from pathlib import Path

from . import subjects
from .config import SCENARIO_KEYS, PressureConfig
from .run import run

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _keys(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in keys if k not in allowed]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none)'}; choose from {','.join(allowed)}"
        )
    return keys


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # SystemExit unwinds like Ctrl-C: the children are killed and the cluster removed.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(prog="python -m bench.pressure", description=__doc__)
    everyone = tuple(subjects.MODULES)
    parser.add_argument(
        "--subjects",
        type=lambda t: _keys(t, everyone, "subject"),
        default=everyone,
        help=f"comma-separated, of {','.join(everyone)} (default: all)",
    )
    parser.add_argument(
        "--scenarios",
        type=lambda t: _keys(t, SCENARIO_KEYS, "scenario"),
        default=SCENARIO_KEYS,
        help=f"comma-separated, of {','.join(SCENARIO_KEYS)} (default: all)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="every phase 4-8x shorter (about 12 min a subject)"
    )
    parser.add_argument(
        "--rate-fraction", type=float, default=0.4, help="of the clean capacity (default 0.4)"
    )
    parser.add_argument(
        "--out", type=Path, help="results folder (default bench/results/pressure-<UTC>)"
    )
    args = parser.parse_args(argv)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or RESULTS / f"pressure-{stamp}"
    config = PressureConfig(
        subjects=args.subjects,
        scenarios=args.scenarios,
        is_quick=args.quick,
        rate_fraction=args.rate_fraction,
    )
    try:
        results = run(config, out)
    except KeyboardInterrupt:
        # The children were killed and the cluster removed on the way out (run's with-blocks).
        print("\ninterrupted: every child stopped, the cluster removed", file=sys.stderr)
        return 130
    print()
    print(results["markdown"])
    print(f"wrote {', '.join(results['files'])} ({results['elapsed_seconds'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
