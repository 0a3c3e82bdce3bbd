"""A real PostgreSQL server for the tests, started from Debian's packages in a temporary folder.

PostgreSQL refuses to run as root, so under root the server runs as `nobody`. bin/test installs the
packages where it can; without them the tests that need a server are skipped and say why.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg2

USER = "graphrag"


def binaries() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, or where Debian puts them."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A throwaway server on 127.0.0.1 with trust authentication for USER; `with` starts and stops it."""

    def __init__(self):
        self.port, self.bin, self.user = _free_port(), binaries(), USER
        if self.bin is None:
            raise FileNotFoundError("PostgreSQL is not installed (initdb and pg_ctl not found)")

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "nobody", "--", *command]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)

    def __enter__(self) -> PostgresServer:
        # Not under pytest's tmp folders: their parents are private to root, and the server runs as nobody.
        self.root = Path(tempfile.mkdtemp(prefix="graphrag-postgres-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody")
        self.data = self.root / "data"
        self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        return self

    def __exit__(self, *exc) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """Create a database; returns its libpq connection string."""
        conn = psycopg2.connect(self.dsn("postgres"))
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return self.dsn(name)

    def dsn(self, database: str) -> str:
        return f"dbname={database} host=127.0.0.1 port={self.port} user={USER}"
