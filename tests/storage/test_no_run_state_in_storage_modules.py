"""No module of the storage wing holds a run's state between calls: what one read or save
learnt of a state's bytes lives in a ``ReadMemo`` its caller owns (one run's handling),
never in a module global that would carry it from one engine to the next; and a memo
shared between threads hands a parsed state to one reader only."""

from __future__ import annotations

import ast
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import orchestrator.storage as storage_wing

STORAGE = Path(storage_wing.__file__).parent

# What the storage wing may keep in a module: none of it is a run's state.
ALLOWED_GLOBALS = {
    # the crash tests' hook: how many crash points this process passed
    ("durable.py", "_crash_points_seen"),
    # whether this process lives for one command (a process's setting, not a run's)
    ("durable.py", "_brief"),
    # the estimate of one file's write time, which picks one write lane or two
    ("durable.py", "_write_ns"),
    # this process's helper thread (with its pid: a forked child makes its own)
    ("durable.py", "_helper"),
    # where the key file is, found again whenever the environment it came from changes
    ("signing_key.py", "_key_file_found"),
}
# Module-level containers (changed in place, so no ``global`` names them).
ALLOWED_CONTAINERS = {
    # the user's key, once read from its file, by the file's path (a key, not a run)
    ("signing_key.py", "_keys"),
    # the directories beneath which no link is followed: a guard that only ever grows
    # (stricter for every run), never a cache a check is skipped on
    ("beneath.py", "_ROOTS"),
}
_CONTAINER_CALLS = {
    "dict",
    "list",
    "set",
    "defaultdict",
    "OrderedDict",
    "deque",
    "WeakValueDictionary",
}


def _module_state(path: Path) -> tuple[set[str], set[str]]:
    """The names ``path`` rebinds with ``global``, and its module-level mutable
    containers."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rebound = {
        name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names
    }
    containers = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        mutable = isinstance(
            value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
        )
        if isinstance(value, ast.Call):
            func = value.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            mutable = name in _CONTAINER_CALLS
        for target in targets:
            if mutable and isinstance(target, ast.Name) and target.id != "__all__":
                containers.add(target.id)
    return rebound, containers


def test_no_storage_module_keeps_run_state_in_a_global() -> None:
    modules = sorted(STORAGE.glob("*.py"))
    assert any(path.name == "state_key.py" for path in modules)
    found_globals, found_containers = set(), set()
    for path in modules:
        rebound, containers = _module_state(path)
        found_globals |= {(path.name, name) for name in rebound}
        found_containers |= {(path.name, name) for name in containers}
    assert found_globals - ALLOWED_GLOBALS == set(), "module state in the storage wing"
    assert found_containers - ALLOWED_CONTAINERS == set(), "module containers in the storage wing"
    # The allow-lists name what is there: an entry that went away leaves with it.
    assert found_globals >= ALLOWED_GLOBALS and found_containers >= ALLOWED_CONTAINERS


def test_the_check_finds_a_global_and_a_container(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "_last = None\n_cache: dict[str, int] = {}\ndef f(x):\n    global _last\n    _last = x\n",
        encoding="utf-8",
    )
    assert _module_state(module) == ({"_last"}, {"_cache"})


THREADS = 16


def signed_state() -> bytes:
    """The bytes of a state as a save writes them, signed over themselves."""
    from orchestrator.storage.state_key import signed_bytes

    data = {
        "phase": 1,
        "completed_phases": [],
        "agent_requests": [],
        "phase_data": {"x_orchestrator": {"run": "r1"}, "notes": "x" * 20_000},
    }
    return signed_bytes(data, {})


@pytest.mark.parametrize("peek_first", [True, False])
def test_threads_sharing_a_memo_never_share_a_parsed_state(peek_first: bool) -> None:
    """Many threads peek at and read the same signed bytes through one memo at once:
    each gets the right data, and no two readers that change it hold the same object."""
    from orchestrator.storage.state_key import ReadMemo, data_if_signed, read_signed

    raw = signed_state()
    expected = json.loads(raw)
    reads = ReadMemo()
    if peek_first:  # the memo starts out with a parse to hand on, as after a command's look
        read_signed(raw, source="state", peek=True, reads=reads)
    barrier = threading.Barrier(THREADS)
    takers: dict[int, Any] = {}
    errors: list[BaseException] = []

    def reader(number: int) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                if number % 2:  # only looks: changes nothing, as a peek promises
                    data, written_here = read_signed(raw, source="state", peek=True, reads=reads)
                    assert written_here and data["phase"] == 1
                    assert data["phase_data"] == expected["phase_data"]
                else:  # reads to change: the object is its own
                    data = data_if_signed(bytes(bytearray(raw)), reads=reads)
                    assert "x_mine" not in data and data == expected
                    data["x_mine"] = number
                    takers[number] = data
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(takers) == list(range(0, THREADS, 2))
    assert len({id(data) for data in takers.values()}) == len(takers)
    assert all(data == {**expected, "x_mine": n} for n, data in takers.items())
    # What the threads changed reached no later reader.
    assert read_signed(raw, source="state", reads=reads)[0] == expected


def test_a_memo_vouches_only_for_its_own_bytes() -> None:
    """Bytes one memo checked are checked again through another memo, or without one:
    an edited copy of them is refused however many memos saw the original."""
    from orchestrator._errors import StateUntrustedError
    from orchestrator.storage.state_key import ReadMemo, data_if_signed, key_file, read_signed

    raw = signed_state()
    first = ReadMemo()
    assert read_signed(raw, source="state", peek=True, reads=first)[1]
    assert not ReadMemo().verified(str(key_file()), raw)  # another memo saw nothing
    changed = raw.replace(b'"phase": 1,', b'"phase": 2,', 1)
    assert changed != raw
    assert data_if_signed(changed, reads=first) is None
    assert data_if_signed(changed) is None
    with pytest.raises(StateUntrustedError):
        read_signed(changed, source="state", reads=first)
