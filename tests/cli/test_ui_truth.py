"""``orchestrate ui`` tells the truth (over plain HTTP, a real server on loopback): an
answer the gate refuses is shown refused in place, never beside a success notice; of
concurrent answers to one request exactly one is taken; the page shows the shape an
answer must have; a run sleeping on a timer says until when, and the server resumes it
once it is due when asked to."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from support import needs

needs.extra("starlette", "ui")

from support.ui_support import REPO, Served, serving  # noqa: E402

pytestmark = pytest.mark.slow

FLOWS = REPO / "tests" / "support" / "ui_flows.py"


def started(workdir: Path, flow: str, **env: str) -> tuple[str, dict[str, object]]:
    """The flow started in ``workdir`` and paused; its run id and status."""
    from support.cli import orchestrate

    workdir.mkdir(parents=True, exist_ok=True)
    done = orchestrate("run", f"{FLOWS}:{flow}", "--workdir", workdir, env=env or None)
    assert done.returncode == 42, done.stderr
    status = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    return str(status["run_id"]), status


def page_of(served: Served, run_id: str, *, index: int = 0) -> str:
    code, _, body = served.request("GET", "/run?" + urlencode({"dir": index, "run": run_id}))
    assert code == 200
    return body.decode()


def post(served: Served, path: str, fields: dict[str, str]) -> tuple[int, dict[str, str], str]:
    page = page_of(served, fields["run"], index=int(fields.get("dir", "0")))
    start = page.index("<meta name='csrf' content='") + len("<meta name='csrf' content='")
    csrf = page[start : page.index("'", start)]
    code, headers, body = served.request(
        "POST", path, body={"dir": "0", **fields, "csrf": csrf}, headers={"Origin": served.origin}
    )
    return code, headers, body.decode()


def no_success_on(page: str) -> None:
    assert "class='notice'" not in page, page
    assert "the run resumes" not in page


def test_an_answer_the_gate_refuses_is_shown_in_place_and_never_as_answered(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "review"
    run_id, status = started(workdir, "Review")
    request_id = str(status["pending"][0]["request_id"])  # type: ignore[index]
    answer = {"run": run_id, "request": request_id, "resume": "1"}
    with serving(workdir) as served:
        code, _, page = post(
            served, "/answer", {**answer, "mode": "json", "answer": '{"verdict": "ok"}'}
        )
        assert code == 200
        no_success_on(page)
        refusal = page[page.index("class='refused'") :]
        assert "response.score" in refusal and "an integer" in refusal and "missing" in refusal
        assert "{&quot;verdict&quot;: &quot;ok&quot;}</textarea>" in page  # the draft stays
        code, _, page = post(served, "/answer", {**answer, "mode": "text", "answer": "high"})
        assert code == 200
        no_success_on(page)
        assert "a JSON document" in page and "high</textarea>" in page
        assert not (workdir / ".agent-response.json").exists()
        good = '{"verdict": "ok", "score": 7}'
        code, headers, _ = post(
            served, "/answer", {**answer, "resume": "", "mode": "json", "answer": good}
        )
        assert code == 303 and "notice=answered" in headers["location"]
        second = '{"verdict": "late", "score": 1}'
        code, _, page = post(served, "/answer", {**answer, "mode": "json", "answer": second})
        assert code == 200
        no_success_on(page)
        assert "has an answer already" in page or "already answered" in page, page
        assert "late" in page  # what was typed is shown, not lost
    assert json.loads(json.loads((workdir / ".agent-response.json").read_text())["response"]) == {
        "verdict": "ok",
        "score": 7,
    }


def test_of_ten_concurrent_answers_exactly_one_is_taken(tmp_path: Path) -> None:
    workdir = tmp_path / "race"
    run_id, status = started(workdir, "Review")
    request_id = str(status["pending"][0]["request_id"])  # type: ignore[index]
    with serving(workdir) as served:
        page = page_of(served, run_id)
        start = page.index("<meta name='csrf' content='") + len("<meta name='csrf' content='")
        csrf = page[start : page.index("'", start)]
        results: dict[int, tuple[int, str]] = {}
        gate = threading.Barrier(10)

        def answer(number: int) -> None:
            fields = {
                "dir": "0",
                "run": run_id,
                "csrf": csrf,
                "request": request_id,
                "mode": "json",
                "answer": json.dumps({"verdict": f"v{number}", "score": number}),
                "resume": "",
            }
            gate.wait()
            code, _, body = served.request(
                "POST", "/answer", body=fields, headers={"Origin": served.origin}
            )
            results[number] = code, body.decode()

        threads = [threading.Thread(target=answer, args=(n,)) for n in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    taken = [n for n, (code, _) in results.items() if code == 303]
    assert len(taken) == 1, {n: code for n, (code, _) in results.items()}
    for number, (code, page) in results.items():
        if number != taken[0]:
            assert code == 200
            no_success_on(page)
            assert "class='refused'" in page, page
            assert f"v{number}" in page  # the refused answer is still there to see
    recorded = json.loads((workdir / ".agent-response.json").read_text())["response"]
    assert json.loads(recorded) == {"verdict": f"v{taken[0]}", "score": taken[0]}


def test_the_page_shows_the_shape_an_answer_must_have(tmp_path: Path) -> None:
    workdir = tmp_path / "shape"
    run_id, _ = started(workdir, "Review")
    with serving(workdir) as served:
        page = page_of(served, run_id)
    shape = page[page.index("class='shape'") :]
    for words in ("verdict", "score", "notes", "an integer", "a string", "required"):
        assert words in shape, words
    assert "&quot;score&quot;: 1" in shape  # the filled-in example, as JSON


def test_an_answer_asked_again_shows_why_the_one_before_was_refused(tmp_path: Path) -> None:
    from support.cli import orchestrate

    workdir = tmp_path / "again"
    run_id, status = started(workdir, "Review")
    request_id = str(status["pending"][0]["request_id"])  # type: ignore[index]
    (workdir / ".agent-response.json").write_text(
        json.dumps(
            {
                "request_id": request_id,
                "status": "success",
                "response": '{"verdict": "ok", "score": "seven"}',
                "created_at": "2026-01-01T00:00:00Z",
            }
        )
    )
    resumed = orchestrate("resume", "--workdir", workdir)
    assert resumed.returncode == 42, resumed.stderr
    with serving(workdir) as served:
        page = page_of(served, run_id)
    asked = page[page.index("Waiting for an answer") :]
    before = asked[asked.index("class='previous") :]
    assert "response.score" in before and "an integer" in before and "seven" in before


def test_a_sleeping_run_says_until_when_and_is_resumed_once_due(tmp_path: Path) -> None:
    from support.cli import orchestrate

    long_id, status = started(tmp_path / "long", "Nap", ORCHESTRATOR_TEST_NAP="3600")
    short_id, _ = started(tmp_path / "short", "Nap", ORCHESTRATOR_TEST_NAP="1")
    until = str(status["sleeping_until"])
    with serving(tmp_path / "long", tmp_path / "short") as served:
        page = page_of(served, long_id)
        assert "sleeping until" in page and f"data-wake='{until}'" in page
        assert "this server resumes it" not in page
        assert "name='resume' value='1' checked" in page  # ticked: the page resumes it
        code, headers, _ = post(served, "/wake", {"run": long_id, "resume": "1"})
        assert code == 303 and "when+it+is+due" in headers["location"], headers
        assert "this server resumes it when it is due" in page_of(served, long_id)
        code, headers, _ = post(served, "/wake", {"run": long_id})  # unticked
        assert code == 303 and "sleeps+on" in headers["location"], headers
        page = page_of(served, long_id)
        assert "this server resumes it" not in page
        assert "name='resume' value='1' checked" not in page  # unticked, it stays so
        # Due now or soon: nobody watches the page, the server resumes the run when it is.
        code, headers, _ = post(served, "/wake", {"dir": "1", "run": short_id, "resume": "1"})
        assert code == 303 and "is+due" in headers["location"], headers
        deadline = time.monotonic() + 60
        while True:
            ended = orchestrate("status", "--workdir", tmp_path / "short", "--json")
            if ended.returncode != 0 or '"completed"' in ended.stdout:
                break
            assert time.monotonic() < deadline, ended.stdout
            time.sleep(0.3)
        page = page_of(served, short_id, index=1)
        assert "badge completed" in page, page
        assert "form method='post' action='/wake'" not in page
    assert "badge paused" in page_of_run(tmp_path / "long")


def page_of_run(workdir: Path) -> str:
    """The run's status as ``orchestrate status`` says it, as a badge would."""
    from support.cli import orchestrate

    status = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    return f"badge {status['status']}"


def test_a_sleeping_run_of_a_store_says_a_worker_resumes_it(pg_dsn: str, tmp_path: Path) -> None:
    from support.cli import orchestrate

    done = orchestrate(
        "run", f"{FLOWS}:Nap", "--store", pg_dsn, env={"ORCHESTRATOR_TEST_NAP": "3600"}
    )
    assert done.returncode == 42, done.stderr
    run_id = done.stdout.strip()
    with serving(store=pg_dsn) as served:
        page = page_of(served, run_id)
    sleep = page[page.index("class='sleep'") :]
    assert "sleeping until" in sleep and "orchestrate worker" in sleep
    assert "name='resume' value='1' checked" not in sleep  # a worker's to do, unless ticked
