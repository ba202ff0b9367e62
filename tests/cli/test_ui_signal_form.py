"""``orchestrate ui`` sends a signal to a run waiting for one (over plain HTTP, a real
server on loopback): the page shows a form with the payload's shape; a payload that
does not fit is refused in place and nothing is kept; one that fits is kept, and the
run resumes when asked."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from support import needs

needs.extra("starlette", "ui")

from support.cli import orchestrate  # noqa: E402
from support.ui_support import REPO, Served, serving  # noqa: E402

pytestmark = pytest.mark.slow

TYPED = f"{REPO / 'tests' / 'support' / 'signal_flows.py'}:TypedApproval"
PATIENCE = 120.0  # a guard against a hang, never a measure


def page_of(served: Served, run_id: str) -> str:
    code, _, body = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))
    assert code == 200
    return body.decode()


def post_signal(served: Served, run_id: str, fields: dict[str, str]) -> tuple[int, str]:
    page = page_of(served, run_id)
    start = page.index("<meta name='csrf' content='") + len("<meta name='csrf' content='")
    csrf = page[start : page.index("'", start)]
    code, _, body = served.request(
        "POST",
        "/signal",
        body={"dir": "0", "run": run_id, **fields, "csrf": csrf},
        headers={"Origin": served.origin},
    )
    return code, body.decode()


def test_a_run_waiting_for_a_signal_gets_it_from_the_page(tmp_path: Path) -> None:
    workdir = tmp_path / "typed"
    workdir.mkdir()
    assert orchestrate("run", TYPED, "--workdir", workdir).returncode == 42
    status = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    run_id = str(status["run_id"])
    with serving(workdir) as served:
        page = page_of(served, run_id)
        form = page[page.index("<h2>Waiting for a signal</h2>") :]
        assert "action='/signal'" in form
        assert "waiting for signal <b class='mono'>approve</b>" in form
        for words in ("approved", "a boolean", "by", "a string", "required"):
            assert words in form, words

        code, refused = post_signal(
            served, run_id, {"name": "approve", "payload": '{"approved": true}', "resume": "1"}
        )
        assert code == 200
        assert "class='notice'" not in refused
        alert = refused[refused.index("class='refused'") :]
        assert "payload.by" in alert and "missing" in alert
        assert "{&quot;approved&quot;: true}</textarea>" in refused  # the draft stays
        assert not list((workdir / ".orchestrator" / "runs").glob("*/signals.ndjson"))

        good = '{"approved": true, "by": "ann"}'
        code, _ = post_signal(served, run_id, {"name": "approve", "payload": good, "resume": "1"})
        assert code == 303
        deadline = time.monotonic() + PATIENCE
        while True:  # the resume the page started takes the signal, then waits for "go"
            now = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
            if now.get("waiting_for_signal") == "go":
                break
            assert time.monotonic() < deadline, now
            time.sleep(0.2)
        assert "waiting for signal <b class='mono'>go</b>" in page_of(served, run_id)
