"""Opening the store: a DuckDB file, MotherDuck, or a DuckLake catalog shared by runs on several machines.

A DuckLake store is named `ducklake:<catalog>`, for example
`ducklake:postgres:dbname=graphrag host=db.internal user=graphrag` (the catalog in PostgreSQL; the password
comes from PGPASSWORD or ~/.pgpass, never from the name), with its data files under `data_path` (a folder,
or an object-store prefix in production). DuckDB's extensions are loaded from their PyPI packages
(duckdb-extension-*), never downloaded at run time.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import duckdb
import tenacity

log = logging.getLogger(__name__)
T = TypeVar("T")
DUCKLAKE_PREFIX = "ducklake:"
LAKE_ALIAS = "graphrag"
# The file name DuckDB derives an extension's entry point from; the postgres package ships it as postgres.*.
_EXTENSION_NAMES = {"postgres": "postgres_scanner"}


def is_ducklake(database: str) -> bool:
    return database.startswith(DUCKLAKE_PREFIX)


def is_local_file(database: str) -> bool:
    """A DuckDB file on this machine (one writer at a time), as opposed to MotherDuck, DuckLake or memory."""
    return not (is_ducklake(database) or database.startswith(("md:", ":memory:")) or "://" in database)


def extension_path(package: str) -> str:
    """The extension file inside its duckdb-extension-<package> wheel, under the name DuckDB expects."""
    install = f"pip install 'duckdb-extension-{package}=={duckdb.__version__}'"
    try:
        module = importlib.import_module(f"duckdb_extension_{package}")
    except ImportError:
        raise RuntimeError(f"DuckDB's {package} extension is not installed: {install}") from None
    shipped = next(Path(module.__file__).parent.glob(f"extensions/v{duckdb.__version__}/*.duckdb_extension"), None)
    if shipped is None:
        raise RuntimeError(f"duckdb-extension-{package} does not match duckdb {duckdb.__version__}: {install}")
    name = _EXTENSION_NAMES.get(package)
    if name is None:
        return str(shipped)
    # A link under the right name, kept per user and DuckDB version; site-packages may be read-only.
    folder = Path(tempfile.gettempdir()) / f"graphrag-duckdb-extensions-{os.getuid()}" / duckdb.__version__
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / f"{name}.duckdb_extension"
    if not link.exists():
        staged = folder / f".{name}.{os.getpid()}"
        staged.symlink_to(shipped)
        staged.replace(link)  # atomic: processes starting together never see a half-made link
    return str(link)


def sql_literal(text: str) -> str:
    """A SQL string literal (ATTACH takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"


_UNITS = {"bytes": 1, "kib": 2**10, "kb": 10**3, "mib": 2**20, "mb": 10**6, "gib": 2**30, "gb": 10**9}
_UNITS |= {"tib": 2**40, "tb": 10**12}


def _bytes(setting: str) -> int:
    """DuckDB's way of writing a size ('256.0 MiB', '19.2 GiB') in bytes."""
    number, unit = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]+)\s*", setting).groups()
    return int(float(number) * _UNITS[unit.lower()])


def _most_memory() -> int:
    """DuckDB's own default bound: 80% of the machine's memory."""
    return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def memory_bound(conn: duckdb.DuckDBPyConnection) -> int:
    """The connection's memory bound (its memory_limit), in bytes."""
    return _bytes(conn.execute("SELECT current_setting('memory_limit')").fetchone()[0])


def with_room(conn: duckdb.DuckDBPyConnection, work: Callable[[], T]) -> T:
    """`work()`, run again with twice the connection's memory bound when DuckDB could not fit one allocation in it.

    The bound keeps what DuckDB holds in memory in check (past it DuckDB evicts and spills to its temp_directory),
    but one allocation larger than it would fail the step: a bound is a target, never a reason to fail. It grows
    for this connection alone, up to DuckDB's own default (80% of the machine's memory)."""
    while True:
        try:
            return work()
        except duckdb.OutOfMemoryException:
            limit = memory_bound(conn)
            if limit >= _most_memory():
                raise
            raised = min(2 * limit, _most_memory())
            log.info("DuckDB needed more than its memory bound of %d MiB: raised to %d MiB", limit >> 20, raised >> 20)
            conn.execute(f"SET memory_limit = '{raised >> 20}MiB'")


def load_extension(conn: duckdb.DuckDBPyConnection, package: str) -> None:
    conn.execute(f"LOAD '{extension_path(package)}'")


def connect(
    database: str, *, data_path: str | None = None, read_only: bool = False, config: dict | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection to the store; for DuckLake, an in-memory DuckDB with the lake attached and in use."""
    config = {"autoinstall_known_extensions": False, **(config or {})}
    if not is_ducklake(database):
        return _quiet(duckdb.connect(database, read_only=read_only, config=config))
    if not data_path:
        raise ValueError(
            "a DuckLake store needs a data path for its files: set GRAPHRAG_DUCKLAKE_DATA_PATH "
            "(a folder, or an object-store prefix such as s3://bucket/graphrag/)"
        )
    conn = duckdb.connect(":memory:", config={**config, "autoload_known_extensions": False})
    try:
        catalog = database.removeprefix(DUCKLAKE_PREFIX)
        if catalog.startswith("postgres:"):
            load_extension(conn, "postgres")
        load_extension(conn, "ducklake")
        if "://" in data_path:
            _object_storage(conn)
        options = ", READ_ONLY" if read_only else ""
        lake, data = sql_literal(DUCKLAKE_PREFIX + catalog), sql_literal(data_path)
        attach = f"ATTACH {lake} AS {LAKE_ALIAS} (DATA_PATH {data}{options})"
        # Processes that find a new catalog together race to create its tables; the losers attach the winner's.
        for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(duckdb.Error),
            stop=tenacity.stop_after_attempt(4),
            wait=tenacity.wait_random_exponential(multiplier=0.2, max=2),
            reraise=True,
        ):
            with attempt:
                conn.execute(attach)
        conn.execute(f"USE {LAKE_ALIAS}")
        _quiet(conn)
    except duckdb.Error as problem:
        conn.close()
        # The catalog string may carry a password; it must not reach a log or the UI.
        raise RuntimeError(f"cannot open the DuckLake store: {redacted(str(problem))}") from None
    return conn


def _quiet(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """No progress bar: DuckDB draws one on stderr for a query past two seconds (a data version of 400,000 vectors),
    into a run's log. A connection setting: DuckDB refuses it in the configuration it opens with."""
    conn.execute("SET enable_progress_bar = false")
    return conn


def _object_storage(conn: duckdb.DuckDBPyConnection) -> None:
    """httpfs for an s3:// data path, with the standard AWS variables as its credentials when they are set.

    AWS_ENDPOINT_URL points at an S3-compatible server (MinIO, Ceph, a cloud's S3 API) instead of AWS.
    """
    load_extension(conn, "httpfs")
    if not os.environ.get("AWS_ACCESS_KEY_ID"):
        return  # public data, or credentials DuckDB finds itself
    options = {
        "KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "SECRET": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "REGION": os.environ.get("AWS_REGION", "us-east-1"),
    }
    if os.environ.get("AWS_SESSION_TOKEN"):
        options["SESSION_TOKEN"] = os.environ["AWS_SESSION_TOKEN"]
    endpoint = urlparse(os.environ.get("AWS_ENDPOINT_URL", ""))
    if endpoint.netloc:
        options |= {"ENDPOINT": endpoint.netloc, "URL_STYLE": "path"}
    settings = ", ".join(f"{key} {sql_literal(value)}" for key, value in options.items())
    use_ssl = ", USE_SSL false" if endpoint.scheme == "http" else ""
    conn.execute(f"CREATE SECRET graphrag_store (TYPE s3, {settings}{use_ssl})")


_SECRET_VARIABLES = ("PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def redacted(text: str) -> str:
    """The text without a password= value or the value of a secret variable."""
    text = re.sub(r"(password\s*=\s*)(\S+)", r"\1***", text, flags=re.IGNORECASE)
    for variable in _SECRET_VARIABLES:
        if os.environ.get(variable):
            text = text.replace(os.environ[variable], "***")
    return text


# Whose lock it is: DuckDB names the holder's program and PID; a program of ours is waited for, any other named.
_OUR_PROCESSES = re.compile(r"graphrag[_-]assets|dagster")
LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


class StoreLocked(RuntimeError):
    """Another process holds the DuckDB file; the message says who and what to do."""


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def connect_when_free(database: Path, read_only: bool = False, wait_seconds: float = 120) -> duckdb.DuckDBPyConnection:
    """Connect to a DuckDB file, waiting while one of our runs holds it; StoreLocked, with who holds it, when
    anything else does.

    Runs of this project hold the file only while they read or write, so one of them is waited for; any other
    holder (a notebook's connection, even read-only) would make the run wait ~100 s and fail, so it is named now.
    The connection itself is the check: a separate check before connecting leaves a gap another process can
    take the lock in.
    """
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return duckdb.connect(str(database), read_only=read_only)
        except duckdb.IOException as problem:
            holder = LOCK_HOLDER.search(str(problem))
            if holder and _OUR_PROCESSES.search(_command_line(int(holder.group(2)))) and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            raise StoreLocked(lock_message(database, problem)) from None


def lock_message(database: Path | str, problem: Exception) -> str:
    """DuckDB's lock error as one paragraph a user can act on."""
    holder = LOCK_HOLDER.search(str(problem))
    who = f"process {holder.group(2)} ({holder.group(1)})" if holder else "another process"
    return (
        f"the DuckDB file {database} is locked by {who}. DuckDB allows one writer, and an open "
        "connection (a notebook's, even read-only) blocks it: close that connection, or read a copy "
        "of the file (see docs/internals.md, 'Reading the store while runs write it')"
    )
