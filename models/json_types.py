"""The two plain-data shapes that cross files rather than layers, named once.

A typed contract between layers or processes is a dataclass; what is written to a file or an MLflow
param and read back is one of these, converted to and from its dataclass at the edge (to_json /
from_json, state_dict / load_state_dict).
"""

from __future__ import annotations

from typing import Any

JSONObject = dict[str, Any]
"""A JSON object: what a dataclass's to_json / to_dict returns and its from_json / from_dict reads
(checkpoint headers, MLflow params, results files, a user's overrides)."""

StateDict = dict[str, Any]
"""A torch-style state dict: what state_dict() returns and load_state_dict() takes; saved with
torch.save and read back with torch.load(weights_only=True), so it holds tensors and plain data only."""
