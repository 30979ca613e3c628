"""A worker process run by a supervisor (``supervisor.py``): what the supervisor tells it through
its environment, and the pipe on which anything, or its end, means "stop" (the supervisor asks,
or is gone).
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
# What the supervisor writes on the pipe when it asks its processes to stop.
STOP = b"stop"


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
        running = asyncio.create_task(worker.run(), name="cronbase-worker")
        # Before the worker has started (waiting for an unreachable database, say) there is
        # nothing to finish: it is cancelled, and its start undoes what it did.
        cancelled = False

        def on_readable() -> None:
            nonlocal cancelled
            try:
                data = os.read(self.pipe, 64)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            loop.remove_reader(self.pipe)
            # A word on the pipe, not a signal: a SIGTERM that reaches this process besides
            # (systemd's KillMode=control-group, a terminal's Ctrl-C to the process group) is
            # then the first signal the worker sees, and stops it gracefully too; two signals
            # would stop it at once. The supervisor writes STOP before it closes its end; an
            # end without it is the kernel's, closing the files of a supervisor that died.
            logger.info(
                "supervisor %s %s: no more claims; running jobs get the grace period (%.0fs)",
                self.supervisor,
                "asks to stop" if data.startswith(STOP) else "is gone",
                worker.options.shutdown_grace,
            )
            worker.stop()
            if not worker.started.is_set():
                cancelled = True
                running.cancel()

        os.set_blocking(self.pipe, False)
        loop.add_reader(self.pipe, on_readable)
        try:
            await running
        except asyncio.CancelledError:
            if not cancelled:
                raise
        finally:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self.pipe)
            os.close(self.pipe)
