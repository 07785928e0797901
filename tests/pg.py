"""A throw-away local PostgreSQL server for tests: ``with postgres_server() as url: ...``.

``initdb`` into a fresh folder, ``pg_ctl start`` on a free TCP port of 127.0.0.1 (no Unix socket,
trust auth), one database created, its SQLAlchemy URL yielded, then ``pg_ctl stop`` and the folder
removed. PostgreSQL refuses to run as root, so as root (CI) the server runs as the ``postgres``
system user that Debian's ``postgresql`` package creates (or ``nobody``), through ``setpriv``.

Needs the server binaries (Debian: ``apt-get install -y postgresql``) and ``psycopg2``.
By hand: ``python tests/pg.py`` starts one and prints its URL until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

__all__ = ["postgres_bindir", "postgres_server", "PostgresUnavailable"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries (or no psycopg2) on this machine."""


def postgres_bindir() -> str:
    """The folder holding initdb/pg_ctl: PATH first, then Debian's /usr/lib/postgresql/<major>/bin (newest)."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return os.path.dirname(on_path)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    if not found:
        raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl); install them: apt-get install -y postgresql")
    return os.path.dirname(found[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and there is no 'postgres' or 'nobody' user to run PostgreSQL as")


def _cmd(argv: list[str], user: pwd.struct_passwd | None) -> list[str]:
    if user is None:
        return argv
    # setpriv (util-linux) drops to the user without a login shell or PAM, unlike su/runuser
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--", *argv]


@contextlib.contextmanager
def postgres_server(database: str = "hlnas_test", timeout_s: float = 60.0) -> Iterator[str]:
    """Start a private PostgreSQL server; yield ``postgresql+psycopg2://hlnas@127.0.0.1:PORT/DATABASE``."""
    try:
        import psycopg2
    except ImportError as e:
        raise PostgresUnavailable("psycopg2 is not installed (pip install psycopg2-binary)") from e
    bindir = postgres_bindir()
    user = _run_as()
    # /tmp itself (not pytest's 0700 tmp_path) so the unprivileged server user can reach its folder
    root = tempfile.mkdtemp(prefix="hlnas-pg-")
    data, log = os.path.join(root, "data"), os.path.join(root, "server.log")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    started = False
    try:
        os.makedirs(data)
        if user is not None:
            for p in (root, data):
                os.chown(p, user.pw_uid, user.pw_gid)
        os.chmod(data, 0o700)
        subprocess.run(_cmd([f"{bindir}/initdb", "-D", data, "-U", "hlnas", "--auth=trust", "--no-sync", "-E", "UTF8"], user),
                       check=True, capture_output=True, env=env, timeout=timeout_s, cwd=root)
        for _ in range(3):  # a free port can be taken between choosing and binding it: try another
            port = _free_port()
            opts = f"-p {port} -c listen_addresses=127.0.0.1 -k '' -c fsync=off -c full_page_writes=off"
            r = subprocess.run(_cmd([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", str(int(timeout_s)), "-o", opts, "start"], user),
                               capture_output=True, env=env, text=True, cwd=root)
            if r.returncode == 0:
                started = True
                break
        if not started:
            tail = open(log).read()[-2000:] if os.path.exists(log) else r.stderr
            raise PostgresUnavailable(f"pg_ctl start failed: {tail}")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="hlnas", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{database}"')
        conn.close()
        yield f"postgresql+psycopg2://hlnas@127.0.0.1:{port}/{database}"
    finally:
        if started:
            subprocess.run(_cmd([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"], user),
                           capture_output=True, env=env, cwd=root)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    with postgres_server() as url:
        print(url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
