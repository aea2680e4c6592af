"""benchmarks/before_after.py: another commit's code as a benchmark's side, in a fresh process."""

from __future__ import annotations

import subprocess

import pytest

from benchmarks.before_after import ROOT, call_in, checkout, commit_of, head_commit


def test_refs_resolve_to_commits_and_unknown_refs_are_refused():
    head = commit_of("HEAD")
    assert len(head) == 40 and int(head, 16) >= 0
    assert head_commit().removesuffix("+changes") == head
    with pytest.raises(SystemExit, match="no-such-ref"):
        commit_of("no-such-ref")


def test_a_call_runs_in_the_checkout_it_is_given(tmp_path):
    """The function runs in a fresh process whose imports and git HEAD are the checkout's."""
    path, commit = checkout("HEAD", into=tmp_path)
    try:
        assert commit == commit_of("HEAD")
        assert (path / "flows").is_dir()
        (path / "where_from.py").write_text("def where():\n    import flows, models\n"
                                            "    return [models.__file__, flows.__file__]\n")
        # the project's packages come from the checkout, not from this one's editable install
        assert call_in(path, "where_from:where", {}) == [str(path / "models" / "__init__.py"),
                                                        str(path / "flows" / "__init__.py")]
        assert call_in(path, "os:getcwd", {}) == str(path)
        assert checkout("HEAD", into=tmp_path) == (path, commit)  # made once
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
