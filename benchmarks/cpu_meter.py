"""CPU-seconds of a run on this machine, every process included (the temporary Prefect API, the
actor workers, SB3's env subprocesses): the machine's busy time from /proc/stat between two
readings. Only sound on a quiet machine, which every benchmark that reports it asks for; the
load average at the start is recorded beside it so that a reader can tell.

Issue 33 asks every peer comparison for CPU-seconds per 1k env steps with all processes counted;
a process-tree count (getrusage) would miss the API server, which outlives a run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")
PROC_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def busy_seconds(stat_text: str | None = None) -> float:
    """Busy CPU seconds of all cores since boot: the aggregate 'cpu' line of /proc/stat,
    user + nice + system + irq + softirq + steal (guest time is inside user already)."""
    text = stat_text if stat_text is not None else open("/proc/stat").read()
    first = text.splitlines()[0].split()
    if first[0] != "cpu":
        raise ValueError(f"/proc/stat starts with {first[0]!r}, not the aggregate 'cpu' line")
    ticks = dict(zip(PROC_STAT_FIELDS, (int(v) for v in first[1:]), strict=False))
    return sum(ticks.get(f, 0) for f in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuReading:
    """What one measured stretch cost: wall seconds, machine busy CPU seconds, the load at its start."""

    wall_s: float
    cpu_s: float
    load_at_start: float
    cores: int


class CpuMeter:
    """with CpuMeter() as m: ...; m.reading: the stretch's wall and busy CPU seconds."""

    def __enter__(self) -> CpuMeter:
        self.load = os.getloadavg()[0]
        self.t0, self.cpu0 = time.perf_counter(), busy_seconds()
        self.reading: CpuReading | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.reading = CpuReading(time.perf_counter() - self.t0, busy_seconds() - self.cpu0, self.load,
                                  os.cpu_count() or 1)


def cpu_s_per_1k_steps(cpu_s: float, env_steps: int) -> float:
    return 1000.0 * cpu_s / env_steps if env_steps else float("nan")
