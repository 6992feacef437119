"""A throw-away PostgreSQL server for the store tests, from the system's packages.

``initdb`` and ``pg_ctl`` from ``$MLSCHED_PG_BIN`` (default: Debian's newest
/usr/lib/postgresql/<version>/bin); as
root the server runs as the ``postgres`` OS user (PostgreSQL refuses root). It listens on
127.0.0.1 at a port the OS picked, and on a socket in its own temporary directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _debian_pg_bin() -> Path:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb (the 15 one if none)."""
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    numbered = [p for p in found if p.parent.name.isdigit()]
    default = Path("/usr/lib/postgresql/15/bin")
    return max(numbered, key=lambda p: int(p.parent.name), default=default)


PG_BIN = Path(os.environ["MLSCHED_PG_BIN"]) if "MLSCHED_PG_BIN" in os.environ else _debian_pg_bin()
START_TIMEOUT_S = 60


def missing() -> str | None:
    """Why a server cannot be started here; None when it can."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_ctl").exists():
        return f"PostgreSQL is not installed (no initdb/pg_ctl in {PG_BIN}; set MLSCHED_PG_BIN)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg 3 is not installed (pip install 'mlsched[postgres]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' OS user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server() -> Iterator[str]:
    """Start a server; yields the conninfo of its ``postgres`` database."""
    root = Path(tempfile.mkdtemp(prefix="mlsched-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = root / "data", _free_port()

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=START_TIMEOUT_S)

    try:
        run(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "mlsched", "-E", "UTF8")
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
        pg_ctl = str(PG_BIN / "pg_ctl")
        run(pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o", options, "start")
        try:
            yield f"host=127.0.0.1 port={port} user=mlsched dbname=postgres"
        finally:
            run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def database(admin_conninfo: str) -> Iterator[str]:
    """A fresh database on the server; yields its conninfo, drops it at the end."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield admin_conninfo.replace("dbname=postgres", f"dbname={name}")
    finally:
        with psycopg.connect(admin_conninfo, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def url(conninfo: str) -> str:
    """The conninfo's ``postgresql://`` URL (what ``mlsched controller --store`` takes)."""
    parts = dict(item.split("=", 1) for item in conninfo.split())
    return f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
