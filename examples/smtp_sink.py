"""examples/smtp_sink.py: a local SMTP server that delivers nowhere and logs what it accepted.

Every message becomes one JSON line in a log file (Message-ID, sender, recipients, subject),
written *before* the server answers ``250``: a client that saw its message accepted will find it
in the log. That log is what the monthly report's ``reconcile`` asks (a real mail provider's
message log or API plays this part in production). aiosmtpd, on loopback, in a thread:

    with SmtpSink(Path("sink.jsonl")) as sink:  # a free port on 127.0.0.1
        smtplib.SMTP(sink.host, sink.port).send_message(...)
    find(Path("sink.jsonl"), "<...@cronbase.example>")  # the log line, or None

``python -m examples.smtp_sink [--port 8025] [--log PATH]`` runs one until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import email
import email.policy
import json
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

DEFAULT_LOG = Path(tempfile.gettempdir()) / "cronbase-smtp-sink.jsonl"


class _LoggingHandler:
    """aiosmtpd handler: append one JSON line per message, then accept it."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._lock = threading.Lock()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content
        raw = content if isinstance(content, bytes) else (content or "").encode()
        message = email.message_from_bytes(raw, policy=email.policy.default)
        entry = {
            "message_id": str(message["Message-ID"] or ""),
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "subject": str(message["Subject"] or ""),
            "received_at": datetime.now(UTC).isoformat(),
        }
        # One write of a whole line, flushed before the 250 reply: a reader sees all of it or,
        # at worst, a last line without its newline, which it skips.
        with self._lock, self.log_path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")
        return "250 Message accepted for delivery"


class _Controller(Controller):
    def _trigger_server(self) -> None:
        # Bound to port 0: learn the port the system chose before aiosmtpd connects to it.
        if self.port == 0 and self.server is not None:
            self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


class SmtpSink:
    """An SMTP server on ``host`` (loopback) that logs each message to ``log_path``."""

    def __init__(self, log_path: Path = DEFAULT_LOG, host: str = "127.0.0.1", port: int = 0):
        self.log_path = log_path
        self.log_path.touch()
        self._controller = _Controller(_LoggingHandler(log_path), hostname=host, port=port)

    @property
    def host(self) -> str:
        return str(self._controller.hostname)

    @property
    def port(self) -> int:
        return int(self._controller.port)

    def start(self) -> SmtpSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def received(self) -> list[dict[str, Any]]:
        return received(self.log_path)

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def received(log_path: Path) -> list[dict[str, Any]]:
    """Every message the sink accepted, oldest first."""
    try:
        text = log_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    # A line still being written has no newline yet: it is not there until it has.
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def find(log_path: Path, message_id: str) -> dict[str, Any] | None:
    """The log line of the message with this Message-ID, or None if the sink never accepted it."""
    return next((m for m in received(log_path) if m["message_id"] == message_id), None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.smtp_sink")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8025)
    parser.add_argument("--log", type=Path, default=DEFAULT_LOG)
    args = parser.parse_args()
    with SmtpSink(args.log, args.host, args.port) as sink:
        print(f"SMTP sink on {sink.host}:{sink.port}, logging to {sink.log_path}; Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
