"""The faults a user meets first, from the command line: each is one line and exit status 2, in
seconds, before any server, worker or MLflow run starts, and nothing is allocated for it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 3 * 2**30  # a hostile size that got past the checks would be killed here, not checked


def cli(*args: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # a server that started would create its database here

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "flows.train", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}",
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, preexec_fn=limit)
    return done, time.monotonic() - started


@pytest.mark.parametrize(("args", "names"), [
    (["--ppo", '{"minibatch_size": 1000000000}'], "ppo.minibatch_size"),
    (["--fragment", "1000000000"], "fragment"),
    (["--fragment", "100000", "--envs-per-actor", "100000"], "envs_per_actor"),
    (["--fragment", "1000000", "--i-max", "1024", "--actor-memory-gb", "4"], "fragment x i_max"),
])
def test_hostile_sizes_are_refused_naming_the_key_before_anything_is_allocated(tmp_path, args, names):
    done, took = cli(*args, tmp_path=tmp_path)
    print(f"{args}: exit {done.returncode} in {took:.1f} s")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and names in line
    assert not (tmp_path / "prefect-home" / "prefect.db").exists() and not (tmp_path / "m.db").exists()


def test_fail_fast_means_before_any_server_starts(tmp_path):
    import importlib.util

    fifo = tmp_path / "resume-here"
    os.mkfifo(fifo)  # reading it would block for ever
    cases = [(["--tracking-uri", "http://127.0.0.1:9"], "MLflow tracking server http://127.0.0.1:9 is unreachable"),
             (["--resume", str(fifo)], "is not a checkpoint file")]
    if importlib.util.find_spec("Box2D") is None:  # an env whose own dependency is missing
        cases.append((["--env", "LunarLander-v3"], 'pip install "gymnasium[box2d]"'))
    for args, says in cases:
        done, took = cli(*args, tmp_path=tmp_path)
        print(f"{args}: exit {done.returncode} in {took:.1f} s")
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: ") and says in line
        assert not (tmp_path / "prefect-home" / "prefect.db").exists()  # no server was started
        assert took < 30  # about 2 s here: the CLI checks before torch, MLflow or a server load
