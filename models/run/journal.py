"""The round journal: what an unfinished round attempt was billed, kept on disk as it happens.

A round's checkpoint is written only once the round is done. If the training process dies in
between, the actors that had returned and the learner's update were still billed. The journal
(one JSON line per event, appended beside the checkpoint) lets the resumed run bill that lost
attempt once: each attempt has an id, and a checkpoint lists the attempts already billed.
Actors still running at the moment of the kill have no measured duration and are not billed.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LostAttempt:
    """What an attempt of round `round_index` that never reached its checkpoint was billed."""

    attempt_id: str
    round_index: int
    actor_billed_s: tuple[float, ...]
    learner_s: float


class RoundJournal:
    """Append-only record of the attempt in flight; `begin` starts a new attempt."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def begin(self, round_index: int, actors: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self._append({"event": "begin", "attempt": uuid.uuid4().hex, "round": round_index,
                      "actors": actors})

    def actor_billed(self, seconds: float) -> None:
        self._append({"event": "actor", "billed_s": float(seconds)})

    def learner_done(self, seconds: float) -> None:
        self._append({"event": "learner", "learner_s": float(seconds)})

    def _append(self, entry: dict) -> None:
        entry["at"] = time.time()
        with self._lock, self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def lost_attempt(self) -> LostAttempt | None:
        """The attempt recorded here, if any (a torn last line, from a kill mid-write, is skipped)."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return None
        entries = []
        for line in lines:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        if not entries or entries[0].get("event") != "begin":
            return None
        return LostAttempt(attempt_id=str(entries[0]["attempt"]), round_index=int(entries[0]["round"]),
                           actor_billed_s=tuple(float(e["billed_s"]) for e in entries if e["event"] == "actor"),
                           learner_s=sum(float(e["learner_s"]) for e in entries if e["event"] == "learner"))
