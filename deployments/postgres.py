"""A throwaway PostgreSQL server for a local Prefect server, for users who outgrow SQLite.

    with temporary_postgres() as url:   # postgresql+asyncpg://minionsrl:<password>@127.0.0.1:<port>/prefect
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = url

Needs Debian's `postgresql` package (`apt-get install -y postgresql`): the binaries of its
newest version under /usr/lib/postgresql/*/bin, or initdb on PATH or in /usr/local/bin. A new
cluster goes in a temp folder (/tmp/minionsrl-pg-*): its own data, a random password for TCP on
127.0.0.1 (a free port), the Unix socket in the folder itself (mode 0700), and a `prefect`
database; on exit, Ctrl-C included, the server is stopped and the folder deleted. Prefect's
migrations create the pg_trgm extension they need (the cluster's owner is its superuser).

The server is the `postgres` binary started as our child, not a pg_ctl daemon, so it dies with
us: it gets SIGQUIT (immediate shutdown) when the process that started it is gone, even after
a SIGKILL that runs no clean-up (Linux's parent-death signal; the folder then stays in /tmp).
initdb and postgres refuse to run as root: as root they run as the `postgres` user (Debian's
package creates it), else `nobody`, which owns the folder.

Commits are not flushed one by one (synchronous_commit=off): Prefect's SQLite database runs in
WAL mode with synchronous=NORMAL, which does not sync each commit either, so the two compare on
equal terms. A crash can lose the last few hundred ms of commits, never consistency.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deployments.processes import die_with_parent
from models.errors import ConfigError

NEEDED = ("initdb", "postgres", "pg_isready", "createdb")
INSTALL_HINT = "install Debian's postgresql package: apt-get install -y postgresql"
USER = "minionsrl"  # the cluster's superuser (not an OS user)
DATABASE = "prefect"
PACKAGE_ROOT = Path("/usr/lib/postgresql")  # Debian: <version>/bin, not on PATH
LOCAL_BIN = Path("/usr/local/bin")


@dataclass(frozen=True)
class RunAs:
    """The OS account initdb and postgres run as (None: ours)."""
    uid: int | None = None
    gid: int | None = None


def find_bindir() -> Path:
    """The folder holding every binary in NEEDED, or ConfigError saying how to install them."""
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    versions = sorted(PACKAGE_ROOT.glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    candidates += versions
    local = LOCAL_BIN / "initdb"
    if local.exists():
        candidates.append(local.resolve().parent)
    for bindir in candidates:
        if all((bindir / name).is_file() for name in NEEDED):
            return bindir
    raise ConfigError(f"PostgreSQL not found (need {', '.join(NEEDED)} in one folder; looked on PATH, "
                      f"in /usr/lib/postgresql/*/bin and /usr/local/bin): {INSTALL_HINT}")


def run_as() -> RunAs:
    """Root: the `postgres` account, else `nobody` (initdb and postgres refuse root)."""
    if os.geteuid() != 0:
        return RunAs()
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return RunAs(entry.pw_uid, entry.pw_gid)
    raise ConfigError("running as root, and neither a `postgres` nor a `nobody` account exists for "
                      f"PostgreSQL to run as: {INSTALL_HINT} (it creates `postgres`)")


def _free_port() -> int:
    import socket

    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(args: list[str], who: RunAs, cwd: Path, log: Path) -> None:
    with open(log, "ab") as out:
        proc = subprocess.run(args, cwd=cwd, user=who.uid, group=who.gid,
                              extra_groups=[] if who.uid is not None else None,
                              stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(args[0]).name} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")


def stop(server: subprocess.Popen, grace_s: float = 20.0) -> None:
    """Fast shutdown (SIGINT: roll back open transactions, close clients); then immediate, then kill."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        if server.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            server.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=wait_s)


@contextlib.contextmanager
def temporary_postgres(timeout_s: float = 60.0) -> Iterator[str]:
    """Start a new PostgreSQL cluster; yield its postgresql+asyncpg URL; stop and delete it on exit."""
    bindir = find_bindir()  # before anything starts, so a missing package is one clear line
    who = run_as()
    # Short (a socket path has ~107 bytes), and in /tmp when another account must reach it.
    folder = Path(tempfile.mkdtemp(prefix="minionsrl-pg-", dir="/tmp" if who.uid is not None else None))
    server = None
    try:
        if who.uid is not None:
            os.chown(folder, who.uid, who.gid)
        log = folder / "postgres.log"
        password = secrets.token_urlsafe(18)
        pwfile = folder / "pw"
        pwfile.write_text(password)
        pwfile.chmod(0o600)
        if who.uid is not None:
            os.chown(pwfile, who.uid, who.gid)
        # TCP (what Prefect uses) needs the password; the socket in our 0700 folder is trusted.
        _run([str(bindir / "initdb"), "-D", str(folder / "data"), "-U", USER, f"--pwfile={pwfile}",
              "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-locale",
              "--no-sync"], who, folder, log)
        pwfile.unlink()
        port = _free_port()
        out = open(log, "ab")  # noqa: SIM115 (closed below, with the server)
        server = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(folder / "data"), "-p", str(port), "-k", str(folder),
             "-c", "listen_addresses=127.0.0.1", "-c", "synchronous_commit=off",
             "-c", "max_connections=200"],
            cwd=folder, user=who.uid, group=who.gid, extra_groups=[] if who.uid is not None else None,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C reaches us, and we stop it in order
            preexec_fn=die_with_parent(signal.SIGQUIT))  # after the uid switch, which clears it
        out.close()
        deadline = time.monotonic() + timeout_s
        while subprocess.run([str(bindir / "pg_isready"), "-q", "-h", str(folder), "-p", str(port)],
                             stdin=subprocess.DEVNULL).returncode != 0:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not come up in {timeout_s:.0f} s:\n"
                                   f"{log.read_text()[-3000:]}")
            time.sleep(0.1)
        _run([str(bindir / "createdb"), "-h", str(folder), "-p", str(port), "-U", USER, DATABASE],
             RunAs(), folder, log)
        yield f"postgresql+asyncpg://{USER}:{password}@127.0.0.1:{port}/{DATABASE}"
    finally:
        if server is not None:
            stop(server)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill, too, stops and deletes it
    with temporary_postgres() as url:
        print(f"export PREFECT_SERVER_DATABASE_CONNECTION_URL='{url}'\nCtrl-C stops it and deletes it",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
