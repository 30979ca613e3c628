"""A worker process run by a supervisor (``supervisor.py``): what the supervisor tells it through
its environment, and the pipe on which it says "stop" or "stop now" (QUIT), and whose end before
either means the supervisor is gone (stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("cronbase")

# What a supervisor puts in the environment of each process it starts.
SUPERVISOR_ENV = "CRONBASE_SUPERVISOR"  # its id, host:pid (the workers row's supervisor)
CHILD_ENV = "CRONBASE_SUPERVISOR_CHILD"  # which of its processes this is, from 1
PIPE_ENV = "CRONBASE_SUPERVISOR_PIPE"  # the read end of the pipe only the supervisor writes
# What the supervisor writes on the pipe when it asks its processes to stop (gracefully), and to
# stop now (hand back the running jobs at once).
STOP = b"stop"
QUIT = b"quit"


@dataclass(frozen=True)
class Supervised:
    """This process's supervisor: its id, this child's number, and the pipe to watch."""

    supervisor: str
    number: int
    pipe: int

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None) -> Supervised | None:
        """The supervisor that started this process (None: started on its own). The variables
        are taken out of the environment, so the processes this one starts (a handler's,
        ``isolation="process"``) are not mistaken for the supervisor's."""
        env = os.environ if environ is None else environ
        supervisor = env.pop(SUPERVISOR_ENV, None)
        number, pipe = env.pop(CHILD_ENV, None), env.pop(PIPE_ENV, None)
        if supervisor is None or number is None or pipe is None:
            return None
        return cls(supervisor, int(number), int(pipe))

    def run(self, worker: Worker) -> None:
        """Run ``worker`` until it stops: on a signal of its own, or when the pipe ends."""
        asyncio.run(self._run(worker))

    async def _run(self, worker: Worker) -> None:
        loop = asyncio.get_running_loop()
        said: set[bytes] = set()

        def on_readable() -> None:
            try:
                data = os.read(self.pipe, 64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            # Words on the pipe, not signals: a SIGTERM that reaches this process besides
            # (systemd's KillMode=control-group, a terminal's Ctrl-C to the process group) is the
            # same request again, which the worker takes as one. The supervisor writes STOP,
            # then perhaps QUIT, and closes its end when this process has exited; an end before
            # that is the kernel's, closing the files of a supervisor that died.
            if not data:
                loop.remove_reader(self.pipe)
                if not said:
                    self._say(worker, "is gone", now=False)
                return
            for word, now in ((STOP, False), (QUIT, True)):
                if word in data and word not in said:
                    said.add(word)
                    self._say(worker, "asks to stop now" if now else "asks to stop", now=now)

        os.set_blocking(self.pipe, False)
        loop.add_reader(self.pipe, on_readable)
        try:
            await worker.run()
        finally:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self.pipe)
            os.close(self.pipe)

    def _say(self, worker: Worker, what: str, *, now: bool) -> None:
        logger.info(
            "supervisor %s %s: %s",
            self.supervisor,
            what,
            "handing back the running jobs"
            if now
            else f"no more claims; running jobs get the grace period "
            f"({worker.options.shutdown_grace:.0f}s)",
        )
        worker.stop(now=now)
