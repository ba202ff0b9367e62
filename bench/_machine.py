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
