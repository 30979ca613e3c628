"""The children of a run: Python processes (``spawn``) and Node processes, started, waited
for, told to go and stopped the same way, and all killed on the way out, whatever happened.

A Python child runs ``reporter.run_entry(target, out, name, *args)`` and reports through the
multiprocessing queue ``out``; "go" is an event shared by the fleet. A Node child prints the
same messages as JSON lines on stdout, read by a thread of its own into the collector; "go" is
a line on its stdin. Every child stops on SIGTERM (workers gracefully, as each library does;
producers and the probe after their current call) and is killed when it outlives the stop's
timeout. Every wait is bounded.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import harness
from .collector import Collector
from .reporter import run_entry

CTX = harness.CTX
NODE_DIR = Path(__file__).resolve().parent / "node"
READY_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0


@dataclass
class PySpec:
    """A Python child: ``target(out, *args)``; ``args`` may hold the placeholder GO for the
    fleet's go event."""

    name: str
    target: Callable[..., None]
    args: tuple[Any, ...] = ()


@dataclass
class NodeSpec:
    """A Node child: ``node <script> <args...>`` in ``node/``, ``env`` added to ours."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


GO = object()  # stands for the fleet's go event in PySpec.args


class _PyChild:
    def __init__(self, spec: PySpec, out: Any, go: Any) -> None:
        self.name = spec.name
        args = tuple(go if a is GO else a for a in spec.args)
        self.process = CTX.Process(target=run_entry, args=(spec.target, out, spec.name, *args))
        self.process.start()

    def is_alive(self) -> bool:
        return self.process.is_alive()

    def go(self) -> None:
        pass  # the fleet's shared event

    def terminate(self) -> None:
        if self.process.is_alive():
            self.process.terminate()

    def join(self, timeout: float) -> None:
        self.process.join(timeout=max(0.0, timeout))

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)


class _NodeChild:
    def __init__(self, spec: NodeSpec, collector: Collector) -> None:
        self.name = spec.name
        self.collector = collector
        self.process = subprocess.Popen(
            ["node", spec.script, *spec.args],
            cwd=NODE_DIR,
            env={**os.environ, **spec.env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                print(f"  [{self.name}] {line.rstrip()}", file=sys.stderr, flush=True)
                continue
            self.collector.handle(_from_json(message))

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def go(self) -> None:
        if self.process.stdin is not None and self.is_alive():
            self.process.stdin.write("go\n")
            self.process.stdin.flush()

    def terminate(self) -> None:
        if self.is_alive():
            self.process.send_signal(signal.SIGTERM)

    def join(self, timeout: float) -> None:
        try:
            self.process.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return
        self.reader.join(timeout=5)

    def kill(self) -> None:
        if self.is_alive():
            self.process.kill()
            self.process.wait(timeout=5)
        self.reader.join(timeout=5)


def _nan(values: Iterable[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _from_json(m: dict[str, Any]) -> tuple[Any, ...]:
    """A Node child's JSON message as the tuple a Python child sends (JSON has no NaN: null)."""
    kind = m["kind"]
    if kind == "ran":
        return ("ran", m["starts"], _nan(m["pickups"]), m["ids"], m["codes"])
    if kind == "enqueued":
        return ("enqueued", m["times"], m["seconds"], m["dues"], m["counts"])
    if kind == "deferred":
        return ("deferred", m["producer"], m["count"])
    if kind == "ready":
        return ("ready", m["name"])
    if kind == "warning":
        return ("warning", m.get("name", "node"), m.get("text", ""))
    return ("error", m.get("name", "node"), m.get("text", json.dumps(m)))


class Fleet:
    """The children of one measurement. The caller stops them group by group (:meth:`stop`:
    producers first, workers last); leaving the ``with`` block kills whatever is left."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.go_event = CTX.Event()
        self.children: list[_PyChild | _NodeChild] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.terminate()
        deadline = time.monotonic() + 5
        for child in self.children:
            child.join(deadline - time.monotonic())
            child.kill()

    def start(self, specs: list[PySpec | NodeSpec]) -> list[_PyChild | _NodeChild]:
        """Start ``specs`` and wait until each reported ready (bounded)."""
        started: list[_PyChild | _NodeChild] = []
        waiting = len(self.collector.ready) + len(specs)
        for spec in specs:
            if isinstance(spec, PySpec):
                child: _PyChild | _NodeChild = _PyChild(spec, self.collector.out, self.go_event)
            else:
                child = _NodeChild(spec, self.collector)
            started.append(child)
            self.children.append(child)
        deadline = time.monotonic() + READY_TIMEOUT
        while len(self.collector.ready) < waiting:
            dead = [c.name for c in started if not c.is_alive()]
            if dead or self.collector.errors:
                raise RuntimeError(
                    f"{', '.join(dead) or 'a child'} failed while starting"
                    + _errors(self.collector)
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"not ready after {READY_TIMEOUT:.0f} s: " + ", ".join(c.name for c in started)
                )
            time.sleep(0.05)
        return started

    def dead(self) -> list[str]:
        """The children that exited (none should before it is stopped)."""
        return [c.name for c in self.children if not c.is_alive()]

    def go(self) -> None:
        self.go_event.set()
        for child in self.children:
            child.go()

    def stop(self, group: list[_PyChild | _NodeChild], timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (every subject's graceful stop), then SIGKILL for what outlives ``timeout``."""
        for child in group:
            child.terminate()
        deadline = time.monotonic() + timeout
        for child in group:
            child.join(deadline - time.monotonic())
            child.kill()


def _errors(collector: Collector) -> str:
    return "".join(f"\n--- {name}:\n{text}" for name, text in collector.errors)
