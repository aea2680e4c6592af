"""A wheel built from the repository installs in a fresh venv, with no packaging warning, and a
training there runs the packaged learned scheduler: what a non-editable install ships is enough."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.e2e

IN_THE_FRESH_VENV = """
import sys
from pathlib import Path

import models, flows
from models.scheduling.learned import resolve_checkpoint
from models.scheduling.learned_spec import SHIPPED

site = Path(sys.argv[1]).resolve()
for package in (models, flows):  # the wheel's copy, not the checkout's
    assert site in Path(package.__file__).resolve().parents, package.__file__
assert site in resolve_checkpoint(SHIPPED).resolve().parents

from deployments.local_api import prefect_api
from flows.train import train

with prefect_api():
    summary = train(scheduler="learned", max_rounds=1, fragment=64, seed=3, tracking_uri=sys.argv[2],
                    checkpoint_dir=sys.argv[3], log_model=False, local_workers=1)
print("scheduler", summary.scheduler, "rounds", summary.rounds)
"""


def test_a_wheel_installs_in_a_fresh_venv_and_trains_with_its_packaged_scheduler(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    warnings = [line for line in (build.stdout + build.stderr).splitlines()
                if "warn" in line.lower() and "Location" not in line]  # pip's index notices are not the build's
    assert warnings == [], warnings
    (wheel,) = (tmp_path / "dist").glob("minionsrl_prefect-*.whl")

    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120)
    python = fresh / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    # its dependencies: this venv's installed packages, behind the wheel's (never the checkout)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    work = tmp_path / "elsewhere"  # not the checkout: nothing there can be imported by accident
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PREFECT_API_URL")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    run = subprocess.run([str(python), "-c", IN_THE_FRESH_VENV, str(site), f"sqlite:///{work / 'mlflow.db'}",
                          str(work / "checkpoints")], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "scheduler learned rounds 1" in run.stdout
