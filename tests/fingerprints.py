"""Same seed, same initial network, checked across machines of one kind.

A sha256 of the raw bytes is exact on one machine, but the orthogonal initialisation goes through
LAPACK's QR, whose last bits differ between CPUs (an AMD EPYC and an Intel Xeon of these machines
disagree at ~1e-7). A fingerprint keeps what a change in the initialisation would move (the
sum, the sum of magnitudes and three elements of every tensor) and is compared to float32
precision, so a reordered seed, another init or another layer shape still fails.
"""

from __future__ import annotations

import pytest
import torch

Fingerprint = dict[str, tuple[float, ...]]


def fingerprint(state: dict[str, torch.Tensor]) -> Fingerprint:
    out = {}
    for name, tensor in state.items():
        x = tensor.detach().double().flatten()
        out[name] = (float(x.numel()), round(float(x.sum()), 7), round(float(x.abs().sum()), 7),
                     round(float(x[0]), 7), round(float(x[x.numel() // 2]), 7), round(float(x[-1]), 7))
    return out


def assert_same_fingerprint(actual: Fingerprint, recorded: Fingerprint) -> None:
    assert sorted(actual) == sorted(recorded)
    for name, values in recorded.items():
        assert actual[name] == pytest.approx(values, rel=1e-5, abs=1e-5), name
