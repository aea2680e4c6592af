"""Checkpoints and policy files: one versioned format, and nothing in a file runs when loaded."""

from __future__ import annotations

import pickle

import pytest
import torch

from models.errors import ConfigError
from models.run.checkpoint import load_policy, load_run_checkpoint, save_checkpoint


class _Payload:
    """Unpickling this writes a marker file: what an attacker's checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("load", [load_run_checkpoint, load_policy])
def test_a_malicious_file_is_refused_and_nothing_in_it_runs(tmp_path, load):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": "minionsrl.run", "version": 2, "config": _Payload(marker)}, path)
    with pytest.raises(ConfigError, match=r"evil\.pt.*refused without running it"):
        load(path)
    assert not marker.exists()
    with open(path, "wb") as f:  # a bare pickle, not even a torch file
        pickle.dump(_Payload(marker), f)
    with pytest.raises(ConfigError, match=r"evil\.pt"):
        load(path)
    assert not marker.exists()


def test_corrupt_missing_and_foreign_files_name_the_file(tmp_path):
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00not a checkpoint at all")
    with pytest.raises(ConfigError, match=r"corrupt\.pt: not a readable checkpoint"):
        load_run_checkpoint(corrupt)
    with pytest.raises(ConfigError, match=r"missing\.pt: no such checkpoint file"):
        load_run_checkpoint(tmp_path / "missing.pt")
    policy = save_checkpoint(tmp_path / "policy.pt", {"format": "minionsrl.policy", "version": 2})
    with pytest.raises(ConfigError, match=r"policy\.pt: not a minionsrl.run file \(format 'minionsrl.policy'\)"):
        load_run_checkpoint(policy)
    old = save_checkpoint(tmp_path / "old.pt", {"format": "minionsrl.run", "version": 1})
    with pytest.raises(ConfigError, match=r"old\.pt: minionsrl.run version 1; this code reads version 2"):
        load_run_checkpoint(old)
