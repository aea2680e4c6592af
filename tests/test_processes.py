"""The servers' start-up settings (deployments/processes.py), on real child processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from deployments.processes import die_with_parent  # noqa: E402

# a child that says when it is ready, then waits to be interrupted
WAIT_FOR_SIGINT = ("import sys, time\nprint('ready', flush=True)\n"
                   "try:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    sys.exit(7)\n")


def spawn_with_sigint_ignored_here(preexec_fn) -> subprocess.Popen:
    """Start the child while this process ignores SIGINT, as a background job of a shell without job
    control does (a script's `cmd &`, CI)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child = subprocess.Popen([sys.executable, "-c", WAIT_FOR_SIGINT], stdout=subprocess.PIPE,
                                 text=True, start_new_session=True, preexec_fn=preexec_fn)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert child.stdout.readline().strip() == "ready"
    return child


def interrupt(child: subprocess.Popen, timeout_s: float = 2.0) -> int | None:
    """SIGINT the child; its exit status, or None if it was still running after timeout_s."""
    child.send_signal(signal.SIGINT)
    try:
        return child.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_server_can_be_interrupted_though_its_starter_ignores_sigint():
    """Prefect's worker stops on SIGTERM by sending itself SIGINT: an inherited SIG_IGN kept it
    running until SIGKILL 10 s later, in every work-pool teardown of a backgrounded test run."""
    assert interrupt(spawn_with_sigint_ignored_here(die_with_parent())) == 7
    # the peer: without the reset, the child inherits the ignored SIGINT and keeps running
    assert interrupt(spawn_with_sigint_ignored_here(None), timeout_s=0.5) is None


def test_a_server_dies_with_its_parent():
    """The parent-death signal is set: a child started by a short-lived parent gets SIGTERM with it."""
    code = ("import subprocess, sys\nfrom deployments.processes import die_with_parent\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'],"
            " preexec_fn=die_with_parent())\nprint(c.pid, flush=True)\n")
    parent = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=30, check=True)
    pid = int(parent.stdout.strip())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as status:
                if any(line.startswith("State:\tZ") for line in status):
                    break  # a zombie: dead, waiting for init to reap it
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"child {pid} outlived its parent by 5 s")
