"""Threads that hash, sign and check at once, in a process that has not hashed yet.

Each run is a fresh interpreter, so no thread finds ``hashlib`` already imported: eight
threads wait at a barrier, then all hash (``sha256_hex``), make a MAC
(``hmac_sha256_hex``), sign a state (``sign_state_data``, ``signed_bytes``) and check
it (``judge_signature``, ``data_if_signed``) through the storage wing's public
functions. Every thread must end with the digests and verdicts a lone thread gets.
The default run takes a few runs; ``pytest -m soak`` takes 200.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

THREADS = 8
#: The program each run executes, in a fresh interpreter; it prints one JSON line.
PROGRAM = r"""
import json, sys, threading

fresh = not {"hashlib", "hmac", "_hashlib"}.intersection(sys.modules)

from orchestrator.storage.durable import sha256_hex
from orchestrator.storage.state_key import (
    data_if_signed, hmac_sha256_hex, judge_signature, load_key, sign_state_data,
    signed_bytes,
)

THREADS = int(sys.argv[1])
load_key(create=True)  # the key is made before: the threads race on the hashing alone
barrier = threading.Barrier(THREADS)
results, errors = [None] * THREADS, []


def state(number):
    return {
        "phase": number,
        "completed_phases": [],
        "agent_requests": [],
        "phase_data": {"x_orchestrator": {"run": number}, "notes": "x" * (4096 * number)},
    }


def work(number):
    try:
        payload = bytes(range(256)) * (64 * (number + 1))
        barrier.wait()
        digest = sha256_hex(payload)
        mac = hmac_sha256_hex(b"k" * 40, payload[:100], payload[100:])
        signed = sign_state_data(state(number))
        verdict = judge_signature(signed)
        document = signed_bytes(state(number), {})
        read = data_if_signed(document)
        results[number] = [digest, mac, verdict.ok, read is not None and read["phase"]]
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        errors.append(f"{type(exc).__name__}: {exc}")


threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"fresh": fresh, "errors": errors, "results": results}))
"""


def expected_results() -> list[list[object]]:
    """What each thread must find, computed here, one hash at a time."""
    import hashlib
    import hmac

    rows: list[list[object]] = []
    for number in range(THREADS):
        payload = bytes(range(256)) * (64 * (number + 1))
        digest = hashlib.sha256(payload).hexdigest()
        mac = hmac.new(b"k" * 40, payload, "sha256").hexdigest()
        rows.append([digest, mac, True, number])
    return rows


def run_once(key_file: Path) -> dict[str, object]:
    """One run of :data:`PROGRAM` in a fresh interpreter, with its own key file."""
    environment = {
        "ORCHESTRATOR_KEY_FILE": str(key_file),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    shown = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(THREADS)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def check_one_run(key_file: Path) -> None:
    found = run_once(key_file)
    assert found["fresh"] is True  # the race needs a process that has not hashed yet
    assert found["errors"] == []
    assert found["results"] == expected_results()


@pytest.mark.parametrize("run", range(6))
def test_threads_hash_sign_and_check_at_once_in_a_fresh_process(tmp_path: Path, run: int) -> None:
    check_one_run(tmp_path / "keys" / "state.key")


@pytest.mark.soak
@pytest.mark.parametrize("run", range(200))
def test_threads_hash_sign_and_check_at_once_200_times(tmp_path: Path, run: int) -> None:
    check_one_run(tmp_path / "keys" / "state.key")
