"""Agent answers of any size, in real processes: a 1 GiB answer streamed by a real agent
costs ``eval run`` at most the cap plus 64 MiB of memory and is kept cut at the cap; an
answer with a 2 MiB tool result is read whole at the default cap, its payload moved to
``assets/``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.storage.durable import sha256_constructor
from support.cli import PATIENCE, child_env, command, orchestrate
from support.eval_agent_server import AgentServer, Good
from support.eval_support import agent_on_a_port

AGENT = Path(__file__).resolve().parents[1] / "support" / "big_answer_agent.py"
MiB = 1 << 20

#: runs a command, then prints its exit code, output and the peak resident memory (KiB)
#: of the command and whatever it waited for: nothing else of the test's is counted
MEASURED = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "peak_kib": peak}))
"""


def measured(*args: object, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *command(*args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env(),
        timeout=PATIENCE,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def write_cases(path: Path, ids: list[str]) -> Path:
    path.write_text(
        json.dumps([{"id": i, "input": {"user": f"do {i}"}} for i in ids]), encoding="utf-8"
    )
    return path


def file_sha256(path: Path) -> str:
    digest = sha256_constructor()()
    with path.open("rb") as file:
        while piece := file.read(MiB):
            digest.update(piece)
    return digest.hexdigest()  # type: ignore[no-any-return]


def the_run(out: Path, side: str) -> Path:
    (run_dir,) = [p for p in (out / side).iterdir() if not p.name.startswith(".")]
    return run_dir


@pytest.fixture
def http_agent(tmp_path: Path) -> Iterator[str]:
    port_file = tmp_path / "agent.port"
    argv = [sys.executable, str(AGENT), "http", str(port_file), str(1 << 30)]
    with agent_on_a_port(argv, port_file) as base_url:
        yield base_url


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["http", "command"])
def test_a_1_gib_answer_costs_the_cap_and_64_mib_and_is_kept_cut_at_the_cap(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cap = 256 * MiB
    if kind == "http":
        agent = ["--base-url", request.getfixturevalue("http_agent")]
    else:
        agent = ["--agent-command", f"{sys.executable} {AGENT} command {1 << 30}"]
    cases = write_cases(tmp_path / "cases.json", ["huge"])
    out = tmp_path / "runs"
    done = measured(
        "eval", "run", "--cases", cases, *agent, "--version", "new", "--out", out,
        "--retries", "0", "--timeout-ms", "120000", "--max-body-bytes", cap,
        cwd=tmp_path,
    )  # fmt: skip
    assert done["code"] == 0, done["stderr"]
    peak_mib = done["peak_kib"] / 1024
    assert peak_mib <= cap / MiB + 64, f"peak resident memory {peak_mib:.0f} MiB"
    run_dir = the_run(out, "new")
    case = json.loads((run_dir / "huge.json").read_text(encoding="utf-8"))
    failure = case["runner_failure"]
    assert (case["status"], failure["class"], failure["error_name"]) == (
        "runner_error",
        "other",
        "BodyTooLarge",
    )
    assert f"max_body_bytes ({cap} bytes)" in failure["error_message"]
    assert "--max-body-bytes" in failure["error_message"]
    assert failure["body_snippet"] == '{"case_id": "' + "x" * (2048 - 13)
    body = run_dir / failure["full_body_saved_to"]
    meta = json.loads((run_dir / failure["full_body_meta_saved_to"]).read_text(encoding="utf-8"))
    assert body.stat().st_size == cap == meta["bytes_written"]
    assert meta["truncated"] is True and meta["bytes_total"] == 1 << 30
    assert meta["sha256"] == file_sha256(body)
    manifest = json.loads((run_dir / "assets" / "manifest.json").read_text(encoding="utf-8"))
    (item,) = [i for i in manifest["items"] if i["kind"] == "full_body"]
    assert (item["size_bytes"], item["sha256"]) == (cap, meta["sha256"])
    # the body file the answer was read into is gone: only what the manifest lists is left
    listed = {i["href"] for i in manifest["items"]} | {"manifest.json"}
    assert {p.name for p in (run_dir / "assets").iterdir()} == listed
    shutil.rmtree(out)  # pytest keeps the last runs' folders: not a quarter GiB each


@pytest.mark.slow
def test_an_accepted_large_answer_is_held_at_most_twice_while_it_is_judged(
    tmp_path: Path,
) -> None:
    size = 96 * MiB
    cases = write_cases(tmp_path / "cases.json", ["large"])
    out = tmp_path / "runs"
    done = measured(
        "eval", "run", "--cases", cases, "--agent-command",
        f"{sys.executable} {AGENT} valid {size}", "--version", "new", "--out", out,
        "--retries", "0", "--timeout-ms", "120000", "--max-body-bytes", 128 * MiB,
        cwd=tmp_path,
    )  # fmt: skip
    assert done["code"] == 0, done["stderr"]
    run_dir = the_run(out, "new")
    case = json.loads((run_dir / "large.json").read_text(encoding="utf-8"))
    assert case["status"] == "ok", case.get("runner_failure")
    (result,) = [e for e in case["events"] if e["type"] == "tool_result"]
    assert size - 1024 < (run_dir / result["payload_asset_href"]).stat().st_size < size
    # the text and the value while it is parsed, then the text and the payload's bytes
    peak_mib = done["peak_kib"] / 1024
    assert peak_mib <= 2 * size / MiB + 64, f"peak resident memory {peak_mib:.0f} MiB"
    shutil.rmtree(out)


@pytest.mark.slow
def test_a_2_mib_tool_result_is_read_at_the_default_cap_and_its_payload_kept_in_assets(
    tmp_path: Path,
) -> None:
    size = 2 * MiB
    cases = write_cases(tmp_path / "cases.json", ["big-tool"])
    out = tmp_path / "runs"
    with AgentServer({"big-tool": [Good(payload_bytes=size)]}) as server:
        done = orchestrate(
            "eval", "run", "--cases", cases, "--base-url", server.base_url,
            "--version", "new", "--out", out, "--retries", "0",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_dir = the_run(out, "new")
    case = json.loads((run_dir / "big-tool.json").read_text(encoding="utf-8"))
    assert case["status"] == "ok", case.get("runner_failure")
    (result,) = [e for e in case["events"] if e["type"] == "tool_result"]
    href = result["payload_asset_href"]
    assert href.startswith("assets/") and "payload_summary" in result
    payload = run_dir / href
    assert json.loads(payload.read_bytes()) == {"blob": "x" * size}
    assert result["payload_asset_sha256"] == file_sha256(payload)
    manifest = json.loads((run_dir / "assets" / "manifest.json").read_text(encoding="utf-8"))
    (item,) = [i for i in manifest["items"] if i["kind"] == "full_payload"]
    assert "assets/" + item["href"] == href and item["sha256"] == result["payload_asset_sha256"]
    assert (run_dir / "big-tool.json").stat().st_size < 64 * 1024  # the payload left inline
