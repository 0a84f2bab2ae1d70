"""A throwaway PostgreSQL server for the store's tests: ``initdb`` into a
temporary folder, ``pg_ctl start`` on a Unix socket only (no TCP port to
collide with), one fresh database per test, ``pg_ctl stop`` at the end.

The server's programs come from ``$CODEX_SIDECAR_TEST_PG_BIN`` (``make test``
installs them under .tools/ and sets it: then a server that does not start
fails the tests), else from ``pg_ctl`` on PATH or Debian's
``/usr/lib/postgresql/*/bin``; with none of them the PostgreSQL tests are
skipped. PostgreSQL refuses to run as root, so as root the server runs as
``nobody``.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ENV_PG_BIN = "CODEX_SIDECAR_TEST_PG_BIN"


def find_pg_bin() -> tuple[Path | None, bool]:
    """The folder holding initdb and pg_ctl, and whether make said where it is."""
    given = os.environ.get(ENV_PG_BIN)
    if given:
        return Path(given), True
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(os.path.realpath(on_path)).parent, False
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return (Path(debian[-1]).parent, False) if debian else (None, False)


def _reachable_by_others(folder: Path) -> bool:
    path = folder.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


class PgServer:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="lossless-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.root, nobody.pw_uid, nobody.pw_gid)
            self._run_as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            if not _reachable_by_others(self.bindir):
                # e.g. a clone under /root (0700): nobody cannot run the programs
                # there, so a copy of the (relocatable) install goes to the temp folder.
                # (pgserver's wheel keeps its shared libraries in pgserver.libs, three levels up.)
                top = self.bindir.parents[2] if (self.bindir.parents[2] / "pgserver.libs").is_dir() else self.bindir.parent
                copy = self.root / "install"
                shutil.copytree(top, copy, symlinks=True)
                self.bindir = copy / self.bindir.relative_to(top)
        self._names = itertools.count(1)
        self._admin: Any = None

    def _run(self, *args: str) -> None:
        done = subprocess.run([str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True, timeout=120, cwd=self.root, **self._run_as)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
        options = f"-c listen_addresses='' -k {self.root} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=60"
        try:
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options, "start")
        except RuntimeError as exc:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{exc}\n{tail}") from None
        import psycopg

        self._admin = psycopg.connect(self.url("postgres"), autocommit=True)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@/{database}?host={self.root}"

    def new_database(self) -> tuple[str, str]:
        name = f"lossless_t{next(self._names)}"
        self._admin.execute(f"CREATE DATABASE {name}")
        return name, self.url(name)

    def drop_database(self, name: str) -> None:
        self._admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        try:
            if self._admin is not None:
                self._admin.close()
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
