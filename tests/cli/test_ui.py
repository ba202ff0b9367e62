"""``orchestrate ui`` over HTTP: the token on every route, forms only from its own pages,
no path outside the served directories, answers through ``respond``'s validation."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from support import needs

needs.extra("starlette", "ui")

from support.ui_support import Served, paused_template_create, serving  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def paused(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    paused_template_create(workdir)
    return workdir


def the_run(workdir: Path) -> tuple[str, dict[str, object]]:
    from support.cli import orchestrate

    status = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    return str(status["run_id"]), status


def form(served: Served, run_id: str, request_id: str, **fields: str) -> dict[str, str]:
    csrf = csrf_of(served, run_id)
    return {"dir": "0", "run": run_id, "request": request_id, "csrf": csrf, **fields}


def csrf_of(served: Served, run_id: str) -> str:
    status, _, body = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))
    assert status == 200
    text = body.decode()
    start = text.index("<meta name='csrf' content='") + len("<meta name='csrf' content='")
    return text[start : text.index("'", start)]


def test_every_route_needs_the_token(paused: Path) -> None:
    run_id, _ = the_run(paused)
    with serving(paused) as served:
        for target in (
            "/",
            f"/run?dir=0&run={run_id}",
            f"/run?dir=0&run={run_id}&view=events",
            f"/run?dir=0&run={run_id}&view=file&path=events.ndjson",
            "/boards",
            "/board?dir=0",
            "/static/ui.js",
            "/no-such-page",
        ):
            status, _, body = served.request("GET", target, cookie=False)
            assert status == 403, target
            assert b"token" in body
            wrong = served.request(
                "GET", target, cookie=False, headers={"Cookie": "orchestrator_ui=x"}
            )
            assert wrong[0] == 403, target
        status, _, _ = served.request(
            "POST", "/answer", body={"dir": "0"}, cookie=False, headers={"Origin": served.origin}
        )
        assert status == 403
        # The printed link: its token becomes a cookie, and leaves the address.
        status, headers, _ = served.request("GET", "/?" + served.url.split("?")[1], cookie=False)
        assert status == 303 and headers["location"] == "/"
        assert (
            "orchestrator_ui=" in headers["set-cookie"]
            and "httponly" in headers["set-cookie"].lower()
        )
        assert "samesite=strict" in headers["set-cookie"].lower()
        status, headers, _ = served.request("GET", "/")
        assert status == 200
        assert "default-src 'none'" in headers["content-security-policy"]


def test_a_cross_site_post_is_refused_and_nothing_is_written(paused: Path) -> None:
    run_id, status = the_run(paused)
    request_id = status["pending"][0]["request_id"]  # type: ignore[index]
    with serving(paused) as served:
        fields = form(served, run_id, str(request_id), mode="text", answer="hello")
        for headers in (
            {"Origin": "http://evil.example"},
            {"Sec-Fetch-Site": "cross-site"},
            {},  # neither: not a browser's form from our page
        ):
            code, _, _ = served.request("POST", "/answer", body=fields, headers=headers)
            assert code == 403, headers
        code, _, _ = served.request(
            "POST", "/answer", body={**fields, "csrf": "forged"}, headers={"Origin": served.origin}
        )
        assert code == 403
    assert not (paused / ".agent-response.json").exists()
    assert not (paused / ".agent-responses").exists() or not list(
        (paused / ".agent-responses").iterdir()
    )


def test_crafted_paths_never_leave_the_served_directories(paused: Path, tmp_path: Path) -> None:
    run_id, _ = the_run(paused)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    run_dir = paused / ".orchestrator" / "runs" / run_id
    os.symlink(secret, run_dir / "link.txt")
    os.symlink(tmp_path, run_dir / "linkdir")
    with serving(paused) as served:
        ok = served.request("GET", f"/run?dir=0&run={run_id}&view=file&path=events.ndjson")
        assert ok[0] == 200 and b"run.start" in ok[2]
        for path in (
            "../../../secret.txt",
            str(secret),
            "link.txt",
            "linkdir/secret.txt",
            "agents/../../../../secret.txt",
            "",
            ".",
        ):
            code, _, body = served.request(
                "GET", "/run?" + urlencode({"dir": 0, "run": run_id, "view": "file", "path": path})
            )
            assert code == 404, path
            assert b"not yours" not in body
        for query in (
            {"dir": 5, "run": run_id},
            {"dir": 0, "run": "../x"},
            {"dir": -1, "run": run_id},
        ):
            code, _, _ = served.request("GET", "/run?" + urlencode(query))
            assert code == 404, query
        page = served.request("GET", f"/run?dir=0&run={run_id}")[2].decode()
        assert "link.txt" not in page  # links are not offered either


def test_a_malformed_json_answer_is_refused_in_place_and_nothing_is_written(paused: Path) -> None:
    run_id, status = the_run(paused)
    request_id = str(status["pending"][0]["request_id"])  # type: ignore[index]
    with serving(paused) as served:
        fields = form(served, run_id, request_id, mode="json", answer='{"technology_stack": ')
        code, _, body = served.request(
            "POST", "/answer", body=fields, headers={"Origin": served.origin}
        )
        assert code == 200  # the page again, the refusal in place
        page = body.decode()
        assert "refused, nothing was written" in page
        assert "technology_stack" in page  # the draft is kept in the form
    assert not (paused / ".agent-response.json").exists()


def test_an_answer_goes_through_respond_s_validation(paused: Path) -> None:
    from support.cli import orchestrate
    from support.ui_support import fake_answer

    run_id, status = the_run(paused)
    request_id = str(status["pending"][0]["request_id"])  # type: ignore[index]
    (item,) = json.loads(orchestrate("pending", "--workdir", paused, "--json").stdout)
    answer = fake_answer(item["request"])  # of the shape the request asks for
    with serving(paused) as served:
        fields = form(served, run_id, request_id, mode="json", answer=answer, resume="")
        code, headers, _ = served.request(
            "POST", "/answer", body=fields, headers={"Origin": served.origin}
        )
        assert code == 303, headers
        assert "notice=answered" in headers["location"]
        again = form(served, run_id, "no-such-request", mode="text", answer="x")
        code, _, body = served.request(
            "POST", "/answer", body=again, headers={"Origin": served.origin}
        )
        assert code == 200
        assert "request no-such-request is not pending" in body.decode()
    written = json.loads((paused / ".agent-response.json").read_text())
    assert written["request_id"] == request_id
    assert json.loads(written["response"]) == json.loads(answer)


def test_regression_reports_are_listed_and_opened_as_they_stand(tmp_path: Path) -> None:
    from support.eval_support import compare, copy_runs

    runs = copy_runs(tmp_path / "work")
    compare(runs)
    with serving(tmp_path / "work") as served:
        code, _, body = served.request("GET", "/evals")
        assert code == 200
        assert "/evals/0/runs/report.html" in body.decode()
        evaluation = json.loads((runs / "evaluation.json").read_text())
        (row,) = re.findall(r"<tr><td class='nowrap'>.*?</tr>", body.decode())
        assert evaluation["generated_at"] in row  # its date
        watched = ", ".join(evaluation["gate"]["fail_on"])
        assert f"failed</b> <span class='dim'>on {watched}</span>" in row  # its gate
        assert "7 cases, 1 new failure, 1 regressed, 1 both failing" in row  # its counts
        assert "r-base → r-new" in row  # the runs it compared
        code, headers, body = served.request("GET", "/evals/0/runs/report.html")
        assert code == 200 and b"<html" in body.lower()
        assert "sandbox" in headers["content-security-policy"]
        assert "script-src" not in headers["content-security-policy"]
        code, _, _ = served.request("GET", "/evals/0/runs/evaluation.json")
        assert code == 200
        for path in ("/evals/0/../secret", "/evals/0/%2e%2e/x", "/evals/3/runs/report.html"):
            code, _, _ = served.request("GET", path)
            assert code == 404, path


def test_runs_of_a_store_are_watched_and_answered_the_same_way(pg_dsn: str, tmp_path: Path) -> None:
    from support.cli import orchestrate
    from support.ui_support import EXAMPLE, fake_answer

    started = orchestrate(
        "run",
        f"{EXAMPLE / 'workflow.py'}:TemplateCreate",
        "--store",
        pg_dsn,
        "--output",
        tmp_path / "template",
        "--input",
        f"project_path={EXAMPLE / 'sample_project'}",
        "--input",
        "template_name=task-tracker",
    )
    assert started.returncode == 42, started.stderr
    run_id = started.stdout.strip()
    (item,) = json.loads(
        orchestrate("pending", "--store", pg_dsn, "--run", run_id, "--json").stdout
    )
    request = item["request"]
    with serving(store=pg_dsn) as served:
        code, _, body = served.request("GET", "/")
        assert code == 200 and run_id[:8] in body.decode()
        page = served.request("GET", f"/run?dir=0&run={run_id}")[2].decode()
        assert f"ask-{request['request_id']}" in page
        assert "events.ndjson" in page
        code, _, body = served.request(
            "GET", f"/run?dir=0&run={run_id}&view=file&path=events.ndjson"
        )
        assert code == 200 and b"run.start" in body
        fields = form(
            served, run_id, request["request_id"], mode="text", answer=fake_answer(request)
        )
        code, headers, _ = served.request(
            "POST", "/answer", body={**fields, "resume": "1"}, headers={"Origin": served.origin}
        )
        assert code == 303 and "the+run+resumes" in headers["location"]
        deadline = time.monotonic() + 60
        while True:
            status = json.loads(
                orchestrate("status", "--store", pg_dsn, "--run", run_id, "--json").stdout
            )
            if status.get("phase", 0) and status["phase"] > 1:
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.2)


def test_a_linked_run_history_is_never_read(paused: Path, tmp_path: Path) -> None:
    """A run directory whose state.json is a link (to a file of the user's) is not listed
    and not shown: the page reads nothing through a link."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"phase_data": {"x_orchestrator": {"workflow_name": "not yours"}}}')
    planted = paused / ".orchestrator" / "runs" / "planted"
    planted.mkdir()
    os.symlink(secret, planted / "state.json")
    with serving(paused) as served:
        listed = served.request("GET", "/")[2].decode()
        assert "not yours" not in listed
        code, _, body = served.request("GET", "/run?dir=0&run=planted")
        assert b"not yours" not in body
        assert code == 404


def test_a_task_board_in_a_store_is_shown(pg_dsn: str, tmp_path: Path) -> None:
    from support.cli import orchestrate
    from support.ui_support import REPO

    example = REPO / "examples" / "task_board"
    done = orchestrate(
        "drive",
        f"{example / 'workflow.py'}:TaskBoardDemo",
        "--workdir",
        tmp_path,
        "--store",
        pg_dsn,
        "--handler",
        f"{sys.executable} {example / 'fake_subagent.py'}",
        "--handler-timeout",
        "10",
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    with serving(store=pg_dsn) as served:
        listed = served.request("GET", "/boards")[2].decode()
        assert run_id in listed
        code, _, body = served.request("GET", "/board?" + urlencode({"dir": 0, "board": run_id}))
        assert code == 200
        page = body.decode()
        assert "data-status='done'" in page and "T-6" in page
        code, _, body = served.request(
            "GET", "/worklog?" + urlencode({"dir": 0, "board": run_id, "task": "T-1"})
        )
        assert code == 200 and "hand in the result" in body.decode()
        code, _, _ = served.request("GET", "/board?" + urlencode({"dir": 0, "board": "nope"}))
        assert code == 404


def test_a_failed_run_is_retried_or_rewound_from_its_page(tmp_path: Path) -> None:
    from support.cli import orchestrate
    from support.ui_support import REPO

    workdir = tmp_path / "failing"
    workdir.mkdir()
    flow = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter"
    failed = orchestrate("run", flow, "--workdir", workdir, "--agent", "subprocess:false")
    assert failed.returncode == 1, failed.stderr
    run_id, _ = the_run(workdir)
    with serving(workdir) as served:
        page = served.request("GET", f"/run?dir=0&run={run_id}")[2].decode()
        assert "Retry the failed phase" in page and "data-confirm" in page
        csrf = csrf_of(served, run_id)
        fields = {"dir": "0", "run": run_id, "csrf": csrf}
        code, headers, _ = served.request(
            "POST", "/retry", body=fields, headers={"Origin": served.origin}
        )
        assert code == 303, headers
        # Retried with the host as its agent: it waits for an answer now.
        page = served.request("GET", f"/run?dir=0&run={run_id}")[2].decode()
        assert "Waiting for an answer" in page and "badge paused" in page
        code, headers, _ = served.request(
            "POST", "/rewind", body={**fields, "to": "one"}, headers={"Origin": served.origin}
        )
        assert code == 303 and "rewound+to+phase+1" in headers["location"], headers
