"""``python -m bench.soak`` (``make soak``): see bench/README.md, "The soak"."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from .config import SoakConfig
from .run import run

RESULTS = Path(__file__).resolve().parent.parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--ci", action="store_true", help="CI's 2-minute version, small scale")
    parser.add_argument("--minutes", type=float, help="length of the run (default 20)")
    parser.add_argument(
        "--rate-fraction", type=float, help="of the measured capacity (default 0.1)"
    )
    parser.add_argument("--max-rate", type=float, help="a ceiling on the rate, jobs/s")
    parser.add_argument("--workers", type=int, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, help="per worker (default 10)")
    parser.add_argument("--producers", type=int, help="producer processes (default 1)")
    parser.add_argument("--batch", type=int, help="jobs per defer_many call; 1: defer()")
    parser.add_argument("--window", type=float, help="retention window, seconds")
    parser.add_argument("--no-idle", action="store_true", help="no idle-in-transaction session")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results")
    args = parser.parse_args(argv)

    config = SoakConfig.ci() if args.ci else SoakConfig()
    changes = {
        "minutes": args.minutes,
        "rate_fraction": args.rate_fraction,
        "max_rate": args.max_rate,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "producers": args.producers,
        "batch": args.batch,
        "window_seconds": args.window,
    }
    config = dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})
    if args.no_idle:
        config = dataclasses.replace(config, is_idle_transaction=False)
    result = run(config, args.out)
    print()
    print(result["markdown"])
    print(f"wrote {result.get('files', '-')} ({result['elapsed_seconds']:.0f}s)")
    if not result["passed"]:
        failed = [c["check"] for c in result["checks"] if c["ok"] is False]
        print(f"soak FAILED: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
