"""Every core of a host: a supervisor runs N worker processes with the same options (``cronbase
worker --processes N``), starts again those that die, and stops them all on SIGTERM.

:meth:`Supervisor.run`, in order:

1. **Start.** With a metrics port, serve one endpoint first (a busy port fails before any
   process starts): the sums of every child's counters, which each writes to files in a
   temporary ``PROMETHEUS_MULTIPROC_DIR`` the supervisor owns and removes, the database side
   once, and the supervisor's own (restarts, crash loops). Then start N children: the same
   command, each told by its environment (``supervised.py``) that it is child k of supervisor
   ``host:pid`` (the ``supervisor`` of its workers row), and given the read end of a pipe whose
   write end only the supervisor holds. Children are new processes (exec), never forks.
2. **Watch.** A child that exits unasked starts again after a delay: 1s, doubling up to 60s,
   back to 1s after a child that ran for a minute. Three exits of one child within five minutes
   are a crash loop: an error in the log naming its last exit status, and
   ``cronbase_supervisor_crash_looping{child}`` 1 on the metrics endpoint. It never gives up: the
   cause is often outside (a deploy half done, a migration not run yet), and a fleet that stops
   itself stops serving; the delay caps its cost at one start a minute. In burst mode children
   are not started again: each drains what is due and exits.
3. **Stop.** On SIGTERM, SIGINT or SIGHUP, write STOP on every pipe: each child stops as on its
   own SIGTERM (no more claims, running jobs get the grace period, the rest is handed back).
   Repeated signals are the same request (``signals.py``); SIGQUIT writes QUIT: each child hands
   back its running jobs at once and exits. A child still there long after its grace period
   (``STOP_BOUND``: its event loop is stuck) is SIGKILLed, the one kill. The exit status is the
   worst of the children's last ones (a child waiting to start again counts with the exit that
   put it there): 0 when every child stopped cleanly.

The pipe also keeps children from outliving their supervisor: when it dies, even by SIGKILL,
the kernel closes its end and each child stops gracefully (the end without STOP says "gone").
Unlike PR_SET_PDEATHSIG, this works beyond Linux, has no window between the child's start and
its setting it up, and is not a signal: a child that also gets the SIGTERM sent to the whole
process group (systemd's default KillMode, Ctrl-C in a terminal, GNU timeout) hears one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..db.outage import OUTAGE, fold_pool_noise
from ..operations.metrics import serve as serve_metrics
from ..operations.metrics import stop as stop_metrics
from ..operations.metrics import supervisor_registry
from .signals import HINT, StopRequests
from .supervised import CHILD_ENV, PIPE_ENV, QUIT, STOP, SUPERVISOR_ENV

if TYPE_CHECKING:
    from ..db.database import Database

logger = logging.getLogger("cronbase")

# The delay before a child that exited unasked starts again: the first, the most, and how long
# a child must have run for the next delay to be the first again.
FIRST_DELAY = 1.0
MOST_DELAY = 60.0
STABLE_AFTER = 60.0
# A crash loop: this many exits of one child within the window (and it has not run for
# STABLE_AFTER since).
CRASH_LOOP_EXITS = 3
CRASH_LOOP_WINDOW = 300.0
# The exit status of a child whose start failed (the command could not be run).
START_FAILED = 127
# How long a stopping child may take beyond twice its grace period (the jobs' grace, then the
# last outcomes' write, bounded by the same) before it is killed: only a child whose event
# loop is stuck takes that long. After a stop now (QUIT), this alone.
STOP_BOUND = 60.0


def available_cores() -> int:
    """``--processes auto``: the cores this process may run on (its CPU affinity, which taskset,
    cgroups' cpusets and container limits narrow), or all of the machine's where there is no
    affinity (macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def exit_status(returncode: int) -> int:
    """A child's exit as a shell sees it: its status, or 128 + the signal that killed it."""
    return returncode if returncode >= 0 else 128 - returncode


def describe_exit(returncode: int) -> str:
    if returncode >= 0:
        return f"status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"killed by {name}"


@dataclass
class Restarts:
    """One child's exits that nobody asked for, and what they call for: the delay before its next
    start, and whether it is in a crash loop. Times are ``time.monotonic()`` seconds."""

    delay: float = 0.0
    count: int = 0
    exits: deque[float] = field(default_factory=deque)

    def exited(self, at: float, lived: float) -> float:
        """Record an exit at ``at`` of a child that ran ``lived`` seconds; returns the delay
        before it starts again."""
        if lived >= STABLE_AFTER:
            # It ran well: what happened before is no longer a loop.
            self.exits.clear()
            self.delay = 0.0
        self.exits.append(at)
        while self.exits and at - self.exits[0] > CRASH_LOOP_WINDOW:
            self.exits.popleft()
        self.delay = FIRST_DELAY if self.delay == 0.0 else min(self.delay * 2, MOST_DELAY)
        self.count += 1
        return self.delay

    def is_crash_looping(self, now: float, running_since: float | None = None) -> bool:
        if running_since is not None and now - running_since >= STABLE_AFTER:
            return False
        recent = [at for at in tuple(self.exits) if now - at <= CRASH_LOOP_WINDOW]
        return len(recent) >= CRASH_LOOP_EXITS


@dataclass
class Child:
    """One of the supervisor's N places: the process in it now (None while it waits to start
    again), the write end of its pipe, its last exit status, and its restarts."""

    number: int
    process: asyncio.subprocess.Process | None = None
    pipe: int | None = None
    running_since: float | None = None
    status: int | None = None
    restarts: Restarts = field(default_factory=Restarts)

    def say(self, word: bytes) -> None:
        """Write ``word`` (STOP, QUIT) on its pipe."""
        if self.pipe is not None:
            # A few bytes into a pipe nobody else writes: written at once, never blocking.
            with contextlib.suppress(OSError):  # it may have exited already
                os.write(self.pipe, word)

    def close_pipe(self) -> None:
        """Close its end of the pipe (the process has exited)."""
        if self.pipe is not None:
            os.close(self.pipe)
            self.pipe = None


class Supervisor:
    """Runs ``processes`` copies of ``command`` (a ``cronbase worker`` command line) until
    stopped; see the module docstring. ``run()`` returns the exit status."""

    def __init__(
        self,
        command: Sequence[str],
        processes: int,
        *,
        db: Database,
        burst: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        shutdown_grace: float = 25.0,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be 1 or more, got {processes}")
        self.command = list(command)
        self.db = db
        self.burst = burst
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.id = f"{socket.gethostname()}:{os.getpid()}"
        self.children = [Child(number) for number in range(1, processes + 1)]
        self._environment = dict(os.environ if environment is None else environment)
        self.shutdown_grace = shutdown_grace
        self._stopping = asyncio.Event()
        self._requests = StopRequests(self._on_stop, f"supervisor {self.id}")
        # When a child still running is killed (STOP_BOUND), once a stop was asked.
        self._kill_at: float | None = None
        self._kill_at_changed = asyncio.Event()

    def run(self) -> int:
        return asyncio.run(self._run())

    async def _run(self) -> int:
        with contextlib.ExitStack() as stack:
            self._environment[SUPERVISOR_ENV] = self.id
            fold_pool_noise()
            stack.enter_context(OUTAGE.watched())
            if self.metrics_port is not None:
                folder = tempfile.mkdtemp(prefix="cronbase-metrics-")
                stack.callback(shutil.rmtree, folder, ignore_errors=True)
                # Read by prometheus_client when a child imports it: its counters go to files.
                self._environment["PROMETHEUS_MULTIPROC_DIR"] = folder
                registry = supervisor_registry(self.db, folder, SupervisorCollector(self))
                server = serve_metrics(self.metrics_port, self.metrics_host, registry)
                stack.callback(stop_metrics, server)
            self._requests.install(asyncio.get_running_loop(), stack)
            logger.info(
                "supervisor %s: starting %d worker processes%s",
                self.id,
                len(self.children),
                " (burst: each drains, then exits)" if self.burst else "",
            )
            watch = asyncio.create_task(self._kill_when_overdue())
            await asyncio.gather(*(self._keep(child) for child in self.children))
            watch.cancel()
        statuses = [child.status or 0 for child in self.children]
        worst = max(statuses)
        logger.info(
            "supervisor %s stopped: exit status %d (worker processes: %s)",
            self.id,
            worst,
            ", ".join(str(status) for status in statuses),
        )
        return worst

    async def _keep(self, child: Child) -> None:
        """Start ``child``, and again each time it exits unasked, until the supervisor stops."""
        while not self._stopping.is_set():
            started = time.monotonic()
            returncode = await self._start_and_wait(child)
            child.status = exit_status(returncode)
            if self._stopping.is_set() or self.burst:
                logger.log(
                    logging.INFO if returncode == 0 else logging.WARNING,
                    "worker process %d exited: %s",
                    child.number,
                    describe_exit(returncode),
                )
                return
            now = time.monotonic()
            delay = child.restarts.exited(now, now - started)
            if child.restarts.is_crash_looping(now):
                logger.error(
                    "worker process %d is in a crash loop: %d exits within %.0fs, the last %s; "
                    "starting it again in %.0fs (the delay doubles up to %.0fs; the supervisor "
                    "keeps trying)",
                    child.number,
                    len(child.restarts.exits),
                    CRASH_LOOP_WINDOW,
                    describe_exit(returncode),
                    delay,
                    MOST_DELAY,
                )
            else:
                logger.warning(
                    "worker process %d exited unasked (%s) after %.0fs; starting it again in %.0fs",
                    child.number,
                    describe_exit(returncode),
                    now - started,
                    delay,
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()

    async def _start_and_wait(self, child: Child) -> int:
        read, write = os.pipe()
        environment = {**self._environment, CHILD_ENV: str(child.number), PIPE_ENV: str(read)}
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command, env=environment, stdin=subprocess.DEVNULL, pass_fds=(read,)
            )
        except OSError as exc:
            os.close(write)
            logger.error("cannot start worker process %d: %s", child.number, exc)
            return START_FAILED
        finally:
            os.close(read)
        child.process, child.pipe, child.running_since = process, write, time.monotonic()
        # A request that came while it was being started did not reach it: pass it on now.
        if self._requests.graceful:
            child.say(STOP)
        if self._requests.now:
            child.say(QUIT)
        logger.info("worker process %d started: pid %d", child.number, process.pid)
        try:
            return await process.wait()
        finally:
            child.close_pipe()
            child.process = child.running_since = None

    def _on_stop(self, now: bool, name: str) -> None:
        running = [child for child in self.children if child.process is not None]
        at = time.monotonic()
        if now:
            logger.info(
                "%s: worker processes hand back their running jobs now, then exit (%d running)",
                name,
                len(running),
            )
            bound = at + STOP_BOUND
        else:
            logger.info(
                "%s: stopping %d worker processes (each finishes its running jobs within its "
                "grace period of %.0fs); %s",
                name,
                len(running),
                self.shutdown_grace,
                HINT,
            )
            bound = at + 2 * self.shutdown_grace + STOP_BOUND
        self._kill_at = bound if self._kill_at is None else min(self._kill_at, bound)
        self._kill_at_changed.set()
        self._stopping.set()
        for child in self.children:
            child.say(QUIT if now else STOP)

    async def _kill_when_overdue(self) -> None:
        """Once a stop was asked, SIGKILL the children still running at ``_kill_at``."""
        await self._stopping.wait()
        while self._kill_at is not None and (wait := self._kill_at - time.monotonic()) > 0:
            self._kill_at_changed.clear()  # a stop now (QUIT) brings it closer
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._kill_at_changed.wait()
        overdue = [child for child in self.children if child.process is not None]
        for child in overdue:
            process = child.process
            if process is None:
                continue
            logger.error(
                "worker process %d (pid %d) has not stopped long after it was asked to (twice "
                "its grace period and %.0fs); killing it: its running jobs wait for their leases",
                child.number,
                process.pid,
                STOP_BOUND,
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()


class SupervisorCollector(Collector):
    """The supervisor's own metrics, read at each scrape (from the metrics thread: it copies
    what it reads)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        processes = GaugeMetricFamily(
            "cronbase_supervisor_processes", "Worker processes this supervisor runs now"
        )
        restarts = CounterMetricFamily(
            "cronbase_supervisor_restarts",
            "Worker processes started again after they exited unasked",
            labels=["child"],
        )
        looping = GaugeMetricFamily(
            "cronbase_supervisor_crash_looping",
            f"1 while the worker process is in a crash loop ({CRASH_LOOP_EXITS} exits within "
            f"{CRASH_LOOP_WINDOW:.0f}s, and not running for {STABLE_AFTER:.0f}s since)",
            labels=["child"],
        )
        children = list(self.supervisor.children)
        processes.add_metric([], sum(1 for child in children if child.process is not None))
        for child in children:
            label = [str(child.number)]
            restarts.add_metric(label, child.restarts.count)
            is_looping = child.restarts.is_crash_looping(now, child.running_since)
            looping.add_metric(label, 1 if is_looping else 0)
        yield from (processes, restarts, looping)
