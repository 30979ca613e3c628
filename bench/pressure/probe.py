"""The claim probe: a process that times its subject's own claim statement ~5 times a second,
each in a transaction rolled back (the claimed jobs go back to waiting), as bench/soak's probe
does for cronbase. A subject whose claim cannot be timed (an internal API that changed, a
statement that fails) is reported "unavailable" with the reason, and the run goes on."""

from __future__ import annotations

import time
from typing import Any

from . import subjects
from .producer import stop_on_sigterm
from .reporter import Reporter


def probe_main(out: Any, key: str, url: str, rate: float, go: Any) -> None:
    stopping = stop_on_sigterm()
    reporter = Reporter("claim")
    reporter.start(out)
    prober = None
    try:
        try:
            prober = subjects.get(key).prober(url)
        except Exception as error:
            out.put(("unavailable", "claim probe", f"{type(error).__name__}: {error}"))
        out.put(("ready", "probe"))
        while not go.wait(0.1):
            if stopping.is_set():
                return
        while prober is not None and not stopping.wait(1.0 / rate):
            t = time.time()
            try:
                seconds = prober.claim()
            except Exception as error:
                out.put(("unavailable", "claim probe", f"{type(error).__name__}: {error}"))
                break
            reporter.record(t, seconds)
        stopping.wait()  # idle until stopped: the fleet stops every child the same way
    finally:
        reporter.close()
        if prober is not None:
            prober.close()
