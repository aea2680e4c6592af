"""Pure logic never imports Prefect or MLflow: models/ is tested fast and directly; tasks/ and flows/
are adapters (and only flows/ writes to MLflow)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_FILES = sorted((ROOT / "models").rglob("*.py"))


ORCHESTRATION = ("prefect", "mlflow")
"""What models/ never imports: Prefect (prefect, prefect_azure, prefect_dask, ...) and MLflow."""


def prefect_imports(source: str, roots: tuple[str, ...] = ORCHESTRATION) -> list[str]:
    """Modules of `roots` (by prefix of their top-level name) that `source` imports, however."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0].startswith(roots)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0].startswith(roots):
                found.append(node.module)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and node.args[0].value.startswith(roots)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module",
                                                                                 "__import__")):
            found.append(node.args[0].value)
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import prefect", ["prefect"]),
        ("import os, prefect.tasks as t", ["prefect.tasks"]),
        ("from prefect import flow", ["prefect"]),
        ("from prefect.futures import wait", ["prefect.futures"]),
        ("from prefect_azure import AciWorker", ["prefect_azure"]),
        ("def f():\n    import prefect\n", ["prefect"]),
        ("import importlib\nimportlib.import_module('prefect.flows')", ["prefect.flows"]),
        ("import numpy\nfrom . import prefect_notes\nx = 'prefect'", []),
        ("from mlflow.tracking import MlflowClient", ["mlflow.tracking"]),
        ("def f():\n    import mlflow\n", ["mlflow"]),
    ],
)
def test_detector(source, expected):
    assert prefect_imports(source) == expected


def test_models_files_exist():
    assert {p.name for p in MODEL_FILES} >= {"gae.py", "ppo.py", "rollout.py", "schedulers.py", "cost.py"}


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_models_never_import_prefect_or_mlflow(path):
    assert prefect_imports(path.read_text()) == [], f"{path.relative_to(ROOT)} imports Prefect or MLflow"


def test_importing_pure_modules_does_not_load_prefect_or_mlflow():
    code = ("import sys\n"
            "import pkgutil, importlib, models\n"
            "for m in pkgutil.walk_packages(models.__path__, 'models.'):\n"
            "    importlib.import_module(m.name)\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0].startswith(('prefect', 'mlflow')))\n"
            "print(','.join(loaded))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"Prefect or MLflow modules loaded: {proc.stdout.strip()}"
