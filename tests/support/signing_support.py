"""Signing states in tests, as ``orchestrate trust`` does, with the session's key.

A test that changes a state by hand on purpose (to see a damaged state refused, or to
play a run begun elsewhere) signs it afterwards, as a person who checked the change
would; a test of the signature itself leaves it unsigned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.storage.state_key import judge_signature, signed_bytes


def sign_state_file(path: Path) -> None:
    """Sign the state at ``path`` as it is now (whatever it holds)."""
    data = json.loads(path.read_bytes())
    path.write_bytes(signed_bytes(data, {}))


def edit_state(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Change the state at ``path`` with ``change`` (it edits the JSON data in place),
    then sign it: an edit a person checked and trusted."""
    data = json.loads(path.read_bytes())
    change(data)
    path.write_bytes(signed_bytes(data, {}))


def signed_copy(source: Path, target: Path) -> Path:
    """Copy the state file ``source`` (a fixture recorded elsewhere) to ``target`` and sign
    it there; returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())
    sign_state_file(target)
    return target


def signature_holds(path: Path) -> bool:
    """Whether the state at ``path`` carries a signature made with the session's key."""
    raw = path.read_bytes()
    return judge_signature(json.loads(raw), raw).ok
