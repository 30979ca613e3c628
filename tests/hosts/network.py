"""Hosts made of Linux network namespaces, and the network between them, which a test can cut.

A :class:`Network` is a router (a namespace that forwards) and hosts, each a namespace of its own
on its own /24, linked to the router by a veth pair::

    db   10.77.0.2 ----+
    w1   10.77.1.2 ----+-- router (10.77.<n>.1 on each link)
    w2   10.77.2.2 ----+
    w3   10.77.3.2 ----+

Everything is made by ``ip`` (Debian's iproute2) and removed by :meth:`Network.close`; nothing
touches the machine's own namespace (its routes, its sysctls), so runs of other users and other
tests do not meet. The faults are the router's, as in a real network:

- :meth:`Network.cut`: packets to and from a host are dropped (policy rules of type blackhole:
  silently, no ICMP, no reset): a partition, both directions;
- :meth:`Network.cut` with ``inbound_only``: the host's packets still arrive, nothing comes
  back (not even TCP's acknowledgements): it can send, not receive;
- :meth:`Network.slow`: the host's link is delayed and lossy (``tc netem``), or, on a kernel
  without netem, a narrow link that queues and drops (``tc tbf``);
- :meth:`Network.heal` undoes them.

A test that needs namespaces is skipped, with the kernel's one-line reason, where the kernel
refuses them (no CAP_SYS_ADMIN, no veth); a missing ``ip`` fails (``make test`` installs it).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest

IP = Path("/usr/sbin/ip")
TC = Path("/usr/sbin/tc")
SUBNET = "10.77"
ROUTER = "router"
# Policy-rule priorities of a host's cut: below "lookup local" (0) nothing goes; these come
# before the main table (32766).
CUT_PRIORITY = 100


class NetworkError(RuntimeError):
    """An ``ip`` or ``tc`` command failed; the message names it and has its output."""


def _run(argv: Sequence[str | Path], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(arg) for arg in argv], capture_output=True, text=True, timeout=30, check=False
    )
    if check and result.returncode != 0:
        command = " ".join(str(arg) for arg in argv)
        raise NetworkError(f"{command} exited {result.returncode}: {result.stderr.strip()}")
    return result


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or ["(no message)"])[0]


def require_namespaces() -> None:
    """Skip the test, with the kernel's reason, where network namespaces or veth pairs cannot be
    made; fail where ``ip`` is missing (not a skip: CI must not pass with these tests left out)."""
    for program, package in ((IP, "iproute2"), (TC, "iproute2")):
        if not os.access(program, os.X_OK):
            raise NetworkError(
                f"{program} is missing: `make test` installs it (scripts/prerequisites.sh), "
                f"or run: sudo apt-get install -y {package}"
            )
    probe = f"cronbase-probe-{os.getpid()}"
    made = _run([IP, "netns", "add", probe], check=False)
    if made.returncode != 0:
        pytest.skip(f"network namespaces refused by this kernel: {_first_line(made.stderr)}")
    try:
        veth = _run(
            [IP, "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"],
            check=False,
        )
        if veth.returncode != 0:
            pytest.skip(f"veth pairs refused by this kernel: {_first_line(veth.stderr)}")
    finally:
        _run([IP, "netns", "del", probe], check=False)


def has_netem() -> str | None:
    """None when ``tc qdisc ... netem`` works here, else the kernel's reason."""
    probe = f"cronbase-netem-{os.getpid()}"
    _run([IP, "netns", "add", probe])
    try:
        _run([IP, "-n", probe, "link", "set", "lo", "up"])
        result = _run(
            [IP, "netns", "exec", probe, TC, "qdisc", "add", "dev", "lo", "root", "netem"],
            check=False,
        )
        return None if result.returncode == 0 else _first_line(result.stderr)
    finally:
        _run([IP, "netns", "del", probe], check=False)


@dataclass(frozen=True)
class Host:
    """One namespace on the network: ``address`` on its ``eth0``, ``link`` the router's end."""

    name: str
    netns: str
    address: str
    subnet: str
    link: str

    @property
    def prefix(self) -> list[str]:
        """What runs a command on this host (in its namespace): ``ip netns exec`` execs it, so
        the process keeps the pid Popen returns."""
        return [str(IP), "netns", "exec", self.netns]


def remove_stale_namespaces() -> None:
    """Remove the namespaces of test runs that died without cleaning up (SIGKILL, a crash):
    ours are named ``cronbase-<pid>-...``, and that pid is gone."""
    listed = _run([IP, "netns", "list"], check=False).stdout.split()
    for name in listed:
        match = re.fullmatch(r"cronbase-(\d+)-[\w-]+", name)
        if match is None or Path(f"/proc/{match.group(1)}").exists():
            continue
        for pid in _run([IP, "netns", "pids", name], check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _run([IP, "netns", "del", name], check=False)


class Network:
    """A router and the hosts added with :meth:`add`; :meth:`close` removes them all."""

    def __init__(self, label: str) -> None:
        require_namespaces()
        remove_stale_namespaces()
        # Names are global to the machine: ours carry our pid and a label.
        self.prefix = f"cronbase-{os.getpid()}-{label}"
        self.hosts: dict[str, Host] = {}
        self.router = self._namespace(ROUTER)
        self._faults: dict[str, list[str]] = {}
        try:
            _run([IP, "-n", self.router, "link", "set", "lo", "up"])
            # The router's own sysctl, in its namespace; the machine's stays as it is.
            _run(
                [
                    *(IP, "netns", "exec", self.router),
                    *("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"),
                ]
            )
        except BaseException:
            self.close()
            raise

    def _namespace(self, name: str) -> str:
        netns = f"{self.prefix}-{name}"
        _run([IP, "netns", "add", netns])
        return netns

    def add(self, name: str) -> Host:
        """A new host ``name``, linked to the router, with a default route through it."""
        index = len(self.hosts)
        subnet = f"{SUBNET}.{index}"
        host = Host(
            name=name,
            netns=self._namespace(name),
            address=f"{subnet}.2",
            subnet=f"{subnet}.0/24",
            link=f"to-{name}"[:15],
        )
        self.hosts[name] = host
        r, h = ("-n", self.router), ("-n", host.netns)
        # Both ends made in their namespaces at once: no name is ever taken in the machine's.
        _run(
            [
                *(IP, "link", "add", "eth0", "netns", host.netns, "type", "veth"),
                *("peer", "name", host.link, "netns", self.router),
            ]
        )
        _run([IP, *r, "addr", "add", f"{subnet}.1/24", "dev", host.link])
        _run([IP, *r, "link", "set", host.link, "up"])
        _run([IP, *h, "link", "set", "lo", "up"])
        _run([IP, *h, "addr", "add", f"{host.address}/24", "dev", "eth0"])
        _run([IP, *h, "link", "set", "eth0", "up"])
        _run([IP, *h, "route", "add", "default", "via", f"{subnet}.1"])
        return host

    # -- faults ----------------------------------------------------------------------------------

    def cut(self, host: Host, *, inbound_only: bool = False) -> None:
        """Drop the host's traffic at the router: both ways, or (``inbound_only``) only what is
        sent to it, so that it can send and not receive. Silent: no ICMP, no reset."""
        rules = [["to", host.subnet]]
        if not inbound_only:
            rules.append(["from", host.subnet])
        for k, rule in enumerate(rules):
            priority = str(CUT_PRIORITY + 10 * list(self.hosts).index(host.name) + k)
            _run([IP, "-n", self.router, "rule", "add", *rule, "blackhole", "priority", priority])
            self._faults.setdefault(host.name, []).append(f"rule {priority}")

    def slow(self, host: Host, *, netem: bool) -> str:
        """Make the host's link slow both ways; returns what was set, in words. With ``netem``:
        100 ms ± 20 ms delay each way and 2% loss; without (a kernel with no netem): 256 kbit/s
        with a queue of 100 ms at most, beyond which packets are dropped (a narrow, congested
        link)."""
        if netem:
            shape = ["netem", "delay", "100ms", "20ms", "loss", "2%"]
            words = "netem: 100 ms ± 20 ms each way, 2% loss each way"
        else:
            shape = ["tbf", "rate", "256kbit", "burst", "4kb", "latency", "100ms"]
            words = "tbf: 256 kbit/s each way, at most 100 ms queued, the rest dropped"
        for netns, device in ((self.router, host.link), (host.netns, "eth0")):
            _run([IP, "netns", "exec", netns, TC, "qdisc", "add", "dev", device, "root", *shape])
        self._faults.setdefault(host.name, []).append("qdisc")
        return words

    def link_stats(self, host: Host) -> dict[str, int]:
        """Packets sent and dropped by the shaped link's two ends (``tc -s qdisc``)."""
        totals = {"packets": 0, "dropped": 0}
        for netns, device in ((self.router, host.link), (host.netns, "eth0")):
            out = _run([IP, "netns", "exec", netns, TC, "-s", "qdisc", "show", "dev", device])
            for packets, dropped in re.findall(
                r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", out.stdout
            ):
                totals["packets"] += int(packets)
                totals["dropped"] += int(dropped)
        return totals

    def heal(self, host: Host) -> None:
        """Undo every fault of the host."""
        for fault in self._faults.pop(host.name, []):
            if fault == "qdisc":
                for netns, device in ((self.router, host.link), (host.netns, "eth0")):
                    _run([IP, "netns", "exec", netns, TC, "qdisc", "del", "dev", device, "root"])
            else:
                priority = fault.split()[1]
                _run([IP, "-n", self.router, "rule", "del", "priority", priority])

    # -- the end ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill what still runs in the namespaces (only ours run there), then remove them: their
        veth pairs go with them."""
        namespaces = [host.netns for host in self.hosts.values()] + [self.router]
        for netns in namespaces:
            pids = _run([IP, "netns", "pids", netns], check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        for netns in namespaces:
            # A namespace whose processes are still dying is removed anyway: its name goes now,
            # the namespace itself with its last process.
            while _run([IP, "netns", "pids", netns], check=False).stdout.strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            _run([IP, "netns", "del", netns], check=False)
        self.hosts.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
