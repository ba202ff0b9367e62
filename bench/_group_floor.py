"""The group floor of an in-process cycle (shared by resume_cycle and long_runs): what a
cycle hands to the durable layer, recorded from a real run (:class:`Capture`), then done
again raw, with no Python work around it (:class:`GroupFloor`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _machine import Series

# One durable-I/O operation of a cycle, relative to the work directory: ("group", files,
# directories) for a group commit, ("append", path, data, durable), ("write", path, data)
# for a file renamed into place without a sync, ("unlink", path).
Operation = tuple[Any, ...]


def ms(ns: int) -> float:
    return ns / 1e6


class Capture:
    """Records, while :meth:`installed` is in force, what each cycle of a run in
    ``workdir`` hands to the durable layer (the same files, bytes and order as a timed
    run): :meth:`next_cycle` starts a cycle; nothing before the first is kept."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.cycles: list[list[Operation]] = []
        self._cycle: list[Operation] | None = None

    def next_cycle(self) -> None:
        self._cycle = []
        self.cycles.append(self._cycle)

    def _add(self, operation: Operation) -> None:
        if self._cycle is not None:
            self._cycle.append(operation)

    def _relative(self, path: Path) -> str:
        return str(Path(path).relative_to(self.workdir))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        from orchestrator.adapters import file_bridge
        from orchestrator.storage import ndjson

        originals = (
            file_bridge.write_together,
            file_bridge.atomic_write,
            file_bridge.remove_file,
            ndjson.append_joined_lines,
        )
        relative = self._relative

        def write_together(items: Any, *, directories: Any = (), make: Any = ()) -> None:
            files = [(relative(path), data) for path, data in items]
            self._add(("group", files, [relative(d) for d in directories]))
            originals[0](items, directories=directories, make=make)

        def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
            self._add(
                ("group", [(relative(path), data)], [])
                if durable
                else ("write", relative(path), data)
            )
            originals[1](path, data, durable=durable)

        def remove_file(path: Path) -> bool:
            self._add(("unlink", relative(path)))
            return originals[2](path)

        def append_joined_lines(path: Path, data: bytes, *, durable: bool = True) -> None:
            self._add(("append", relative(path), data, durable))
            originals[3](path, data, durable=durable)

        file_bridge.write_together = write_together
        file_bridge.atomic_write = atomic_write
        file_bridge.remove_file = remove_file
        ndjson.append_joined_lines = append_joined_lines
        try:
            yield
        finally:
            (
                file_bridge.write_together,
                file_bridge.atomic_write,
                file_bridge.remove_file,
                ndjson.append_joined_lines,
            ) = originals


class GroupFloor:
    """Each captured cycle's durable I/O done raw, with no Python work around it: every
    group's files written to temporaries, one ``syncfs``, the renames, one ``syncfs``;
    the event lines appended; the request renamed into place; the response unlinked (a
    file put there, untimed, before the cycle, as the host's answer is). :meth:`replay`
    does the next cycle's; run it right after the cycles it stands beside, so that both
    see the disk as it is then (its speed drifts on a shared machine)."""

    _FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC

    def __init__(self, root: Path, cycles: list[list[Operation]]) -> None:
        self.cycles = cycles
        self.samples = Series()
        self.directory = Path(tempfile.mkdtemp(prefix="floor-group-", dir=root))
        self.root_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)

    def replay(self) -> None:
        from orchestrator.storage.durable import sync_filesystem

        if len(self.samples) >= len(self.cycles):
            return
        operations = self.cycles[len(self.samples)]
        directory, flags = self.directory, self._FLAGS
        for operation in operations:
            if operation[0] == "unlink":  # the host's answer, there before the cycle
                answer = directory / operation[1]
                answer.parent.mkdir(parents=True, exist_ok=True)
                answer.write_bytes(b"{}")
        start, cpu = time.perf_counter_ns(), time.process_time_ns()
        for operation in operations:
            kind = operation[0]
            if kind == "group":
                renames = []
                for name, data in operation[1]:
                    target = os.path.join(directory, name)
                    folder = os.path.dirname(target)
                    if not os.path.isdir(folder):
                        os.makedirs(folder)
                    tmp = os.path.join(folder, "." + os.path.basename(target) + ".tmp")
                    fd = os.open(tmp, flags, 0o644)
                    os.write(fd, data)
                    os.close(fd)
                    renames.append((tmp, target))
                sync_filesystem(self.root_fd)
                for tmp, target in renames:
                    os.replace(tmp, target)
                sync_filesystem(self.root_fd)
            elif kind == "append":
                fd = os.open(directory / operation[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                os.write(fd, operation[2])
                if operation[3]:
                    os.fdatasync(fd)
                os.close(fd)
            elif kind == "write":
                tmp = directory / f".{operation[1]}.tmp"
                fd = os.open(tmp, flags, 0o644)
                os.write(fd, operation[2])
                os.close(fd)
                os.replace(tmp, directory / operation[1])
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / operation[1])
        self.samples.add(ms(time.perf_counter_ns() - start), ms(time.process_time_ns() - cpu))

    def close(self) -> Series:
        os.close(self.root_fd)
        shutil.rmtree(self.directory)
        return self.samples
