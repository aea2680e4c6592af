"""Another commit's code as one side of a benchmark: "before and after, in one run".

`checkout(ref)` keeps a git worktree of the commit beside this one (.worktrees/<commit>, ignored
by git); `call_in(checkout_dir, "module:function", kwargs)` runs that function in a fresh Python
process started in the checkout, so every import (models/, flows/, tasks/ and the benchmark's own
module) is that commit's, and returns what it returned (JSON). Actor worker processes inherit the
checkout's path. Run the "after" side the same way (call_in(ROOT, ...)): both then pay a fresh
process's first-call costs alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKTREES = ROOT / ".worktrees"


def commit_of(ref: str, repo: Path = ROOT) -> str:
    """The full commit id `ref` names (a SystemExit naming the ref if git does not know it)."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo,
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"--before {ref!r}: not a commit of {repo}")
    return found.stdout.strip()


def head_commit(repo: Path = ROOT) -> str:
    """HEAD's commit, with '+changes' when the work tree differs from it."""
    head = commit_of("HEAD", repo)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                           capture_output=True, text=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def checkout(ref: str, into: Path = WORKTREES) -> tuple[Path, str]:
    """(a worktree of the commit `ref` names, its commit id): made once, kept for later calls."""
    commit = commit_of(ref)
    path = into / commit[:12]
    if not (path / "flows").is_dir():
        into.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=ROOT, check=True,
                       capture_output=True)
    return path, commit


def call_in(checkout_dir: Path, target: str, kwargs: dict, env: dict[str, str] | None = None):
    """`module:function`(**kwargs) in a fresh process in checkout_dir; its JSON result."""
    module, _, function = target.partition(":")
    code = ("import json, sys, importlib; f = getattr(importlib.import_module(sys.argv[1]), sys.argv[2]); "
            "json.dump(f(**json.loads(sys.argv[3])), open(sys.argv[4], 'w'))")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        environment = {**os.environ, **(env or {}), "PYTHONPATH": str(checkout_dir)}
        subprocess.run([sys.executable, "-c", code, module, function, json.dumps(kwargs), str(out)],
                       cwd=checkout_dir, env=environment, check=True)
        return json.loads(out.read_text())
