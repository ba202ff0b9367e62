"""What the benchmarks print about the machine they ran on (shared by every bench)."""

from __future__ import annotations

import os
from pathlib import Path


def load_average() -> float:
    """The 1-minute load average (NaN where the system does not say)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def fs_type(path: Path) -> str:
    """The file system type of ``path`` from /proc/mounts (fsync cost depends on it)."""
    try:
        mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return "unknown file system"
    best = ("", "unknown")
    resolved = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and resolved.startswith(parts[1]) and len(parts[1]) >= len(best[0]):
            best = (parts[1], parts[2])
    return f"{best[1]} on {best[0]}"


class Series(list[float]):
    """Wall-clock samples in ms, with the CPU time of each (this process's, or the child's)."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []

    def add(self, wall_ms: float, cpu_ms: float) -> None:
        self.append(wall_ms)
        self.cpu.append(cpu_ms)

    def extend_from(self, other: Series) -> None:
        for wall_ms, cpu_ms in zip(other, other.cpu, strict=True):
            self.add(wall_ms, cpu_ms)
