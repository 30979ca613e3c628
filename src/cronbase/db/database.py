"""The one seam to PostgreSQL: URLs, connection options, pools, named queries, the NOTIFY channel
and the fetch helpers. Services and the worker take a :class:`Database`, never the App.

With ``pooler="transaction"`` (pgbouncer, Supabase, Neon...) each statement may land on another
server connection, so: no server-side prepared statements, no session state (advisory locks are
transaction-scoped everywhere), and LISTEN only on ``listen_url`` (a direct or session-mode URL);
without one, workers poll.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, TypedDict

import psycopg
from psycopg.rows import TupleRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..checks import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_RESULT_BYTES
from ..errors import ConfigurationError
from ..payload.encode import JSONDumps, JSONLoads
from ..payload.sealing import (
    ENV_KEYS,
    SEALED_COLUMNS,
    Keyring,
    KeySource,
    KeysUnavailable,
    keyring_from_environment,
    may_be_sealed,
    open_json_value,
    open_row,
)
from . import embedded, migrate, pool
from .queries import Queries

logger = logging.getLogger("cronbase")

Pooler = Literal["session", "transaction"]
POOLERS: tuple[Pooler, ...] = ("session", "transaction")
Row = dict[str, Any]
Params = Mapping[str, Any] | None

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
DEFAULT_POOL_SIZE = 4
# How long a caller waits for a pooled connection (server away, pool exhausted) before an error.
POOL_TIMEOUT_SECONDS = 10.0
# How long closing a pool at its loop's end waits for the pool's own tasks to stop.
POOL_CLOSE_SECONDS = 5.0


def resolve_pooler(pooler: str | None) -> Pooler:
    value = pooler or os.environ.get("CRONBASE_POOLER") or "session"
    for known in POOLERS:
        if value == known:
            return known
    raise ConfigurationError(f"unknown pooler {value!r}; one of: {', '.join(POOLERS)}")


# Database.history_reads run with it (Queries.history_reads says why).
JIT_OFF = b"SET LOCAL jit = off"


class DatabaseOptions(TypedDict, total=False):
    """:class:`Database`'s settings but its URL, typed once: ``App(database_url, **options)``
    takes them and passes them on (their defaults and meaning: Database's)."""

    schema: str
    listen_url: str | None
    pooler: str | None
    pool_size: int
    max_payload_bytes: int
    json_dumps: JSONDumps | None
    json_loads: JSONLoads | None
    max_result_bytes: int
    encryption_keys: KeySource | None
    encrypt: bool


class Database:
    """One database and schema, as every part of cronbase reaches it.

    ``url`` (else ``CRONBASE_DATABASE_URL``, ``DATABASE_URL``, else the embedded server),
    ``listen_url`` (else ``CRONBASE_LISTEN_URL``; in session mode, ``url``), ``pooler``
    (``session`` or ``transaction``, else ``CRONBASE_POOLER``), ``pool_size`` (the most
    connections each of this process's pools opens), ``max_payload_bytes`` (the largest payload
    a defer accepts, as JSON), ``max_result_bytes`` (the largest result a handler may return,
    as JSON), ``json_dumps`` and ``json_loads`` (payload to JSON text and back; None: the json
    module, with cronbase's own types), ``encryption_keys`` (what seals and opens encrypted
    jobs: ``"id=key,..."``, a mapping, a Keyring or a callable returning one; None:
    ``CRONBASE_ENCRYPTION_KEYS``, else the file ``CRONBASE_ENCRYPTION_KEYS_FILE``), ``encrypt``
    (every task's default for ``@app.task(encrypt=...)``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str = "cronbase",
        listen_url: str | None = None,
        pooler: str | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        json_dumps: JSONDumps | None = None,
        json_loads: JSONLoads | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        encryption_keys: KeySource | None = None,
        encrypt: bool = False,
    ) -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ConfigurationError(
                f"schema name {schema!r} must be lower-case letters, digits and underscores"
            )
        if not isinstance(pool_size, int) or pool_size < 1:
            raise ConfigurationError(f"pool_size must be at least 1, got {pool_size!r}")
        self.schema = schema
        self.queries = Queries.for_schema(schema)
        self.channel = self.queries.channel
        self.pooler = resolve_pooler(pooler)
        self.pool_size = pool_size
        # Not a connection setting, but the write path's: every insert of a payload passes here.
        if not isinstance(max_payload_bytes, int) or max_payload_bytes < 2:
            raise ConfigurationError(
                f"max_payload_bytes must be an integer of at least 2, got {max_payload_bytes!r}"
            )
        self.max_payload_bytes = max_payload_bytes
        if not isinstance(max_result_bytes, int) or max_result_bytes < 2:
            raise ConfigurationError(
                f"max_result_bytes must be an integer of at least 2, got {max_result_bytes!r}"
            )
        self.max_result_bytes = max_result_bytes
        for name, func in (("json_dumps", json_dumps), ("json_loads", json_loads)):
            if func is not None and not callable(func):
                raise ConfigurationError(
                    f"{name} must be a function (like json.{name.removeprefix('json_')}), "
                    f"got {func!r}"
                )
        # None: encode_payload's own fast encoder (it also writes datetimes, dataclasses...).
        self.json_dumps = json_dumps
        # Decodes each claimed job's payload text (worker/claim.py).
        self.json_loads: Callable[[str], Any] = json_loads or json.loads
        if not isinstance(encrypt, bool):
            raise ConfigurationError(f"encrypt must be True or False, got {encrypt!r}")
        self.encrypt = encrypt
        # Given keys are checked now (a bad one is a one-line error at start); a callable (a KMS)
        # and the environment are read at first use, once.
        self._keys: Keyring | None = None
        self.encryption_keys = encryption_keys  # as given (None: the environment's)
        if encryption_keys is not None and not callable(encryption_keys):
            self._keys = Keyring.from_source(encryption_keys)
        self._explicit_url = url
        # What App(...) was given itself: it wins over the environment (and so over the CLI's
        # --database-url, --listen-url and --pooler, which the CLI then says).
        self.given: dict[str, str | None] = {
            "database_url": url or None,
            "listen_url": listen_url or None,
            "pooler": pooler or None,
        }
        if url:
            pool.check_url(url)
        self._listen_url = listen_url or os.environ.get("CRONBASE_LISTEN_URL") or None
        if self._listen_url:
            pool.check_url(self._listen_url)
        self._url: str | None = None
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._async_pool: AsyncConnectionPool | None = None
        self._async_pool_loop: asyncio.AbstractEventLoop | None = None
        self._async_pool_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._async_pool_guard: asyncio.Task[None] | None = None

    @property
    def keys(self) -> Keyring | None:
        """The keyring encrypted jobs are sealed and opened with; None when none is configured."""
        if self._keys is None:
            if self.encryption_keys is None:
                self._keys = keyring_from_environment()
            else:
                try:
                    self._keys = Keyring.from_source(self.encryption_keys)
                except ConfigurationError:
                    raise
                except Exception as exc:  # a KMS client's own error: said in one line
                    raise ConfigurationError(
                        f"encryption_keys() raised {type(exc).__name__}: {str(exc)[:200]}"
                    ) from None
        return self._keys

    def open_payload(self, value: Any, task: str) -> Any:
        """A claimed job's decoded payload with its sealed parts opened (an encrypted task's
        own, sealed for ``task``, and the sealed results a workflow merged into it); an
        EncryptionError naming the key when this process cannot open them, also when its keys
        cannot be read (the worker leaves such a job waiting: worker/outcomes.py key_wait)."""
        try:
            keys = self.keys
        except ConfigurationError as exc:
            raise KeysUnavailable(str(exc), "?") from None
        return open_json_value(keys, value, "payload", self.json_loads, task)

    def sealing_keys(self, task: str) -> Keyring:
        """The keyring to seal task ``task``'s values with; ConfigurationError when none."""
        keys = self.keys
        if keys is None:
            raise ConfigurationError(
                f"task {task!r} is encrypted (encrypt=True) but no encryption keys are "
                f"configured: set {ENV_KEYS} (id=key, a key from `cronbase keys new`) or "
                "App(encryption_keys=...)"
            )
        return keys

    # -- where ------------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The database's clock (what decides due-ness and leases)."""
        row = self.fetch_one(self.queries.database_now)
        assert row is not None
        return row["now"]  # type: ignore[no-any-return]

    def cronbase_schemas(self) -> list[str]:
        """The schemas of this database that hold cronbase's tables."""
        with self.connect(application_name="cronbase-cli") as conn:
            return [name for (name,) in conn.execute(self.queries.list_cronbase_schemas)]

    def schema_exists(self) -> bool:
        with self.connect(application_name="cronbase-cli") as conn:
            row = conn.execute(self.queries.schema_exists, {"schema": self.schema}).fetchone()
        return bool(row and row[0])

    @property
    def is_embedded(self) -> bool:
        return pool.configured_url(self._explicit_url) is None

    @property
    def url(self) -> str:
        """The configured URL; with none, the embedded server is started and migrated."""
        with self._lock:
            if self._url is None:
                configured = pool.configured_url(self._explicit_url)
                if configured is not None:
                    pool.check_url(configured)
                    self._url = configured
                else:
                    url = embedded.start()
                    # Nobody else manages the embedded database, so keep its schema current.
                    with pool.connect(url) as conn:
                        migrate.apply_migrations(conn, self.schema)
                    self._url = url
            return self._url

    @property
    def listen_url(self) -> str | None:
        """Where LISTEN goes: ``listen_url``, else the URL in session mode, else None (poll)."""
        if self._listen_url:
            return self._listen_url
        return None if self.pooler == "transaction" else self.url

    def options(self) -> dict[str, Any]:
        """psycopg options for every connection: through a transaction pooler, no prepared
        statements (the next statement may run on a server connection that never saw them)."""
        return {"prepare_threshold": None} if self.pooler == "transaction" else {}

    # -- connections -----------------------------------------------------------------------------

    def connect(self, *, application_name: str = "cronbase") -> psycopg.Connection:
        """A dedicated autocommit connection (the caller closes it)."""
        return pool.connect(self.url, application_name=application_name, **self.options())

    async def connect_async(self, *, application_name: str = "cronbase") -> psycopg.AsyncConnection:
        url = await asyncio.to_thread(lambda: self.url)
        return await pool.connect_async(url, application_name=application_name, **self.options())

    async def connect_listener(self, application_name: str) -> psycopg.AsyncConnection:
        """A connection for LISTEN, on :attr:`listen_url` (never through a transaction pooler)."""
        url = await asyncio.to_thread(lambda: self.listen_url)
        if url is None:
            raise ConfigurationError("no listen_url: notifications are off in transaction mode")
        return await pool.connect_async(url, application_name=application_name)

    def pool(self) -> ConnectionPool:
        """The sync pool for enqueue and admin calls (opened on first use)."""
        url = self.url
        with self._lock:
            if self._pool is None:
                self._pool = self._open(url)
            return self._pool

    def _open(self, url: str) -> ConnectionPool:
        # One direct connection first: the pool would only say "timeout" where the server says why.
        pool.connect(url, **self.options()).close()
        opened = pool.new_pool(
            url,
            min_size=1,
            max_size=self.pool_size,
            name=f"cronbase-{self.schema}",
            timeout=POOL_TIMEOUT_SECONDS,
            **self.options(),
        )
        opened.open(wait=True, timeout=pool.CONNECT_TIMEOUT_SECONDS)
        return opened

    async def async_pool(self) -> AsyncConnectionPool:
        """The async pool of the running event loop (opened on first use in each loop)."""
        loop = asyncio.get_running_loop()
        if self._usable_async_pool(loop):
            assert self._async_pool is not None
            return self._async_pool
        # One opener per loop: concurrent first calls would each open a pool, leaking all but one.
        if self._async_pool_lock is None or self._async_pool_lock[0] is not loop:
            self._async_pool_lock = (loop, asyncio.Lock())
        async with self._async_pool_lock[1]:
            if not self._usable_async_pool(loop):
                opened = await self.open_async_pool(
                    name=f"cronbase-{self.schema}", min_size=1, max_size=self.pool_size
                )
                self._async_pool, self._async_pool_loop = opened, loop
                self._async_pool_guard = loop.create_task(
                    _close_when_cancelled(opened), name=f"cronbase-{self.schema}-pool-closer"
                )
            assert self._async_pool is not None
            return self._async_pool

    def _usable_async_pool(self, loop: asyncio.AbstractEventLoop) -> bool:
        # Closed by its guard when the loop's tasks were cancelled (asyncio.run's end, or a
        # framework's shutdown): a later call on the same loop opens a new one.
        return (
            self._async_pool is not None
            and self._async_pool_loop is loop
            and not self._async_pool.closed
        )

    async def open_async_pool(
        self, *, name: str, min_size: int, max_size: int, wait_seconds: float = POOL_TIMEOUT_SECONDS
    ) -> AsyncConnectionPool:
        """A new open async pool (the worker keeps its own); fails fast with the server's reason."""
        url = await asyncio.to_thread(lambda: self.url)
        await (await pool.connect_async(url, **self.options())).close()
        opened = pool.new_async_pool(
            url,
            min_size=min_size,
            max_size=max_size,
            name=name,
            timeout=wait_seconds,
            **self.options(),
        )
        await opened.open(wait=True, timeout=pool.CONNECT_TIMEOUT_SECONDS)
        return opened

    # -- statements ------------------------------------------------------------------------------

    def rows(self, query: bytes, params: Params = None) -> list[TupleRow]:
        """Run a statement on the pool; tuple rows. The enqueue path: no dict per row."""
        # getconn/putconn rather than pool.connection(): the context manager's generator and its
        # commit of an autocommit connection (no transaction to end) cost ~2.4 us of ~4.5 per
        # call. putconn still rolls back or discards a connection left in a transaction or broken.
        sync_pool = self.pool()
        conn = sync_pool.getconn()
        try:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []
        finally:
            sync_pool.putconn(conn)

    async def rows_async(self, query: bytes, params: Params = None) -> list[TupleRow]:
        async_pool = await self.async_pool()
        conn = await async_pool.getconn()
        try:
            cur = await conn.execute(query, params)
            return await cur.fetchall() if cur.description else []
        finally:
            await async_pool.putconn(conn)

    def fetch_all(self, query: bytes, params: Params = None) -> list[Row]:
        """Run a statement on the pool; dict rows, their sealed values opened (:meth:`opened`)."""
        with self.pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            if query not in self.queries.history_reads:
                cur.execute(query, params)
                return self.opened(cur.fetchall()) if cur.description else []
            with conn.transaction():  # SET LOCAL: through a transaction pooler too
                cur.execute(JIT_OFF)
                cur.execute(query, params)
                return self.opened(cur.fetchall()) if cur.description else []

    def opened(self, rows: list[Row]) -> list[Row]:
        """Rows as views read them: an encrypted task's payload, result and errors opened with
        this process's keys, or marked encrypted with the key they need (payload/sealing.py
        open_row). The one place operator views decrypt: the worker opens what it claims
        itself (open_payload), and logs never show either."""
        keys: Keyring | None = None
        looked = False  # the keys are read once, and only when a row may be sealed
        for row in rows:
            if any(may_be_sealed(row.get(column)) for column in SEALED_COLUMNS):
                if not looked:
                    keys, looked = self.keys, True
                open_row(keys, row, self.json_loads)
        return rows

    def fetch_one(self, query: bytes, params: Params = None) -> Row | None:
        rows = self.fetch_all(query, params)
        return rows[0] if rows else None

    async def fetch_all_async(self, query: bytes, params: Params = None) -> list[Row]:
        async_pool = await self.async_pool()
        async with async_pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            if query not in self.queries.history_reads:
                await cur.execute(query, params)
                return self.opened(await cur.fetchall()) if cur.description else []
            async with conn.transaction():  # as in fetch_all
                await cur.execute(JIT_OFF)
                await cur.execute(query, params)
                return self.opened(await cur.fetchall()) if cur.description else []

    async def fetch_one_async(self, query: bytes, params: Params = None) -> Row | None:
        rows = await self.fetch_all_async(query, params)
        return rows[0] if rows else None

    # -- schema ----------------------------------------------------------------------------------

    def migrate(self, *, force: bool = False) -> list[str]:
        """Create or upgrade the schema; returns the migrations applied. ``force`` applies a
        contract migration even while workers too old for it are alive."""
        if self.pooler == "transaction":
            raise ConfigurationError(
                "cannot migrate through a transaction pooler (the migration lock is held for the "
                "session); run `cronbase migrate` with a direct or session-mode URL "
                "(--database-url postgresql://...@db-host:5432/...)"
            )
        with self.connect(application_name="cronbase-migrate") as conn:
            return migrate.apply_migrations(conn, self.schema, force=force)

    def require_current(self, *, newer_ok: bool = False) -> int:
        """Raise MigrationError with the fix when the schema is not at this code's version
        (``newer_ok``: or newer, with no contract migration this code is too old for)."""
        with self.connect(application_name="cronbase-check") as conn:
            return migrate.require_current(conn, self.schema, newer_ok=newer_ok)

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the sync pool (the async one closes with ``aclose``)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def close_async_pool_soon(self) -> None:
        """From any thread: close the async pool on its own loop while that runs, without
        waiting (a pool is bound to its loop; one whose loop has stopped goes with it)."""
        guard, loop = self._async_pool_guard, self._async_pool_loop
        if guard is None or loop is None or loop.is_closed() or not loop.is_running():
            return
        loop.call_soon_threadsafe(guard.cancel)  # the guard closes its pool once cancelled

    async def aclose(self) -> None:
        if self._async_pool is not None:
            await self._async_pool.close()
            self._async_pool = None
        if self._async_pool_guard is not None:
            self._async_pool_guard.cancel()  # its pool is closed: closing again is a no-op
            self._async_pool_guard = None
        await asyncio.to_thread(self.close)


async def _close_when_cancelled(opened: AsyncConnectionPool) -> None:
    """Wait until cancelled, then close ``opened``: a pool must not outlive its event loop.

    asyncio.run ends by cancelling every task of its loop and waiting for them. psycopg_pool's
    maintenance worker catches the CancelledError of a connection attempt in progress (it keeps
    the pool consistent for callers) and goes back to waiting for its next task, so a loop that
    ended while the pool was growing never finished. This task is cancelled with the others;
    closing the pool sends its workers their stop.
    """
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        await opened.close(timeout=POOL_CLOSE_SECONDS)
        raise
