"""What a signal asks of a worker or a supervisor. Deploy tools deliver signals in patterns of
their own, so a request is read from the signal's kind, never from how many arrived:

- SIGTERM, SIGINT, SIGHUP: **stop gracefully** (no more claims; running jobs get the grace
  period; what still runs then is handed back). However many arrive, in whatever order, it is
  one request: GNU ``timeout`` signals the process and then its process group (two SIGTERMs
  microseconds apart), systemd's ``KillMode=control-group`` and a terminal's Ctrl-C signal every
  process of the group at once, a supervisor's pipe says the same again, a script may repeat it.
- SIGQUIT (Ctrl-\\ in a terminal): **stop now**: running jobs are handed back at once (queued
  again, the attempt not counted), outcomes already known are written, and the process exits.
  Repeats of it are the same request too.

Nothing here kills: a stop never costs an attempt. SIGKILL, which no process can catch, is the
only way to end a worker at once (its running jobs then wait for their leases to run out, and
those attempts count). SIGHUP is left alone when the process was started ignoring it
(``nohup``): its user asked for the worker to outlive the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

logger = logging.getLogger("cronbase")

GRACEFUL = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
NOW = signal.SIGQUIT
HINT = "SIGQUIT (Ctrl-\\) hands back the running jobs and exits now"


@dataclass
class StopRequests:
    """The stop requests a process received, read from its signals: ``on_stop(now, name)`` is
    called once for the first graceful request and once for the first "now" (which may come
    first, or after a graceful one), with the signal's name; it says what it does. Repeats are
    logged, at most one line a second."""

    on_stop: Callable[[bool, str], None]
    # What is stopping, for the log: "worker w1", "supervisor host:42".
    what: str
    graceful: bool = False
    now: bool = False
    _repeat_logged_at: float = field(default=float("-inf"), repr=False)

    def install(
        self,
        loop: asyncio.AbstractEventLoop,
        stack: contextlib.ExitStack | contextlib.AsyncExitStack,
    ) -> None:
        """Handle the signals on ``loop`` until ``stack`` closes."""
        for sig in (*GRACEFUL, NOW):
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started by nohup (or told so): not ours to take back
            loop.add_signal_handler(sig, self.received, sig)
            stack.callback(loop.remove_signal_handler, sig)

    def received(self, sig: signal.Signals) -> None:
        name = signal.Signals(sig).name
        if sig == NOW:
            if self.now:
                return self._repeat(name)
            self.now = True
            self.on_stop(True, name)
            return None
        if self.graceful or self.now:
            return self._repeat(name)
        self.graceful = True
        self.on_stop(False, name)
        return None

    def _repeat(self, name: str) -> None:
        # A storm of signals must not become a storm of log lines.
        at = time.monotonic()
        if at - self._repeat_logged_at >= 1.0:
            self._repeat_logged_at = at
            logger.info(
                "%s: %s is already stopping%s",
                name,
                self.what,
                "" if self.now else f"; {HINT}",
            )
