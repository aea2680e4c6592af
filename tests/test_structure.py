"""The tree keeps its shape: models/ in documented concept packages, every source file short enough
to read and named in ARCHITECTURE.md, every function short enough to hold in one's head."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("flows", "tasks", "models", "deployments")
SOURCES = sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py"))
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 80


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_models_is_packages_named_for_concepts_each_with_a_docstring():
    top = {p.name for p in (ROOT / "models").iterdir() if not p.name.startswith(("_", "."))}
    modules = {name for name in top if name.endswith(".py")}
    assert modules <= {"errors.py", "json_types.py"}, f"modules outside a concept package: {modules}"
    packages = [p for p in (ROOT / "models").iterdir() if (p / "__init__.py").exists() and p.name != "data"]
    assert {p.name for p in packages} >= {"rl", "run", "billing", "scheduling", "impact", "report", "envs"}
    for package in packages:
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
        assert doc and len(doc.split()) >= 20, f"models/{package.name} has no paragraph saying what it holds"


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_no_file_over_400_lines_and_no_function_over_80(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_FILE_LINES, f"{_rel(path)}: {len(text.splitlines())} lines"
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{_rel(path)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_architecture_names_every_source_file():
    architecture = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"[\w/]+\.py", architecture))
    missing = [_rel(p) for p in SOURCES if _rel(p) not in named and p.name != "__init__.py"]
    assert not missing, f"ARCHITECTURE.md does not name: {missing}"
    stale = sorted(n for n in named if n.split("/")[0] in LAYERS and not (ROOT / n).exists())
    assert not stale, f"ARCHITECTURE.md names files that are gone: {stale}"
