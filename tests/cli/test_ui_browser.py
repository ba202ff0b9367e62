"""``orchestrate ui`` in a real browser (Debian's /usr/bin/chromium, driven by
Playwright): a person answers the template-create example to its end through the page,
a malformed JSON answer is refused in place, and the task board's page shows the tasks
move while the example runs; a run asleep on a timer, its "resume" ticked, completes by
itself once due; an answer of the wrong shape is refused in place (no success notice)
and the shape it must have is shown, with an example. No console error, no request to
any host but the server; each test leaves a screenshot in pytest's tmp dir.

Needs the ``ui`` and ``report-test`` extras and the chromium package; ``.ci/run``
installs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support import cli, needs

needs.extra("starlette", "ui")
sync_api = needs.extra("playwright.sync_api", "report-test")
CHROMIUM = needs.CHROMIUM
pytestmark = [needs.chromium, pytest.mark.slow]

from support.ui_support import REPO, Served, fake_answer, paused_template_create, serving  # noqa: E402


@contextmanager
def browser_page(served: Served, problems: list[str]) -> Iterator[Any]:
    """A page that may talk to the server alone; what goes wrong lands in ``problems``."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 1000})

            def route(route: Any) -> None:
                if route.request.url.startswith(served.origin + "/"):
                    route.continue_()
                else:
                    problems.append(f"request to another host: {route.request.url}")
                    route.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on(
                "console", lambda m: m.type == "error" and problems.append(f"console: {m.text}")
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("dialog", lambda d: d.accept())
            yield page
        finally:
            browser.close()


def visit(page: Any, url: str) -> None:
    """Go to ``url``; the page may be reloading itself (a run that paused or ended)."""
    for _ in range(5):
        try:
            page.goto(url)
            return
        except sync_api.Error:
            page.wait_for_timeout(200)
    page.goto(url)


def badge(page: Any) -> str:
    """The run's status on the page, read once the page is still."""
    for _ in range(10):
        try:
            page.wait_for_load_state("load")
            return str(page.inner_text("h1 .badge"))
        except sync_api.Error:
            page.wait_for_timeout(200)
    return str(page.inner_text("h1 .badge"))


def pending_request(page: Any) -> dict[str, Any] | None:
    """The first request the run page asks an answer for, as the page shows it."""
    forms = page.query_selector_all("article.ask:not(.answered)")
    if not forms:
        return None
    article = forms[0]
    return {
        "request_id": article.get_attribute("id").removeprefix("ask-"),
        "agent_name": article.query_selector("h3").inner_text().split()[0],
        "prompt": article.query_selector(".prompt").inner_text(),
    }


def test_a_person_answers_the_example_to_its_end(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    paused_template_create(workdir)
    problems: list[str] = []
    with serving(workdir) as served, browser_page(served, problems) as page:
        page.goto(served.url)
        assert page.url == served.origin + "/"  # the token went into a cookie
        page.click("table.runs a")
        run_url = page.url
        # A malformed JSON answer: refused in place, as typed and once sent.
        first = page.query_selector("form.answer")
        first.query_selector("input[value=json]").check()
        first.query_selector("textarea").fill('{"technology_stack": ')
        assert "not JSON yet" in first.query_selector(".check").inner_text()
        first.query_selector("button").click()
        page.wait_for_selector(".refused")
        assert "refused, nothing was written" in page.inner_text(".refused")
        assert not (workdir / ".agent-response.json").exists()
        page.screenshot(path=str(tmp_path / "refused.png"), full_page=True)
        answered = 0
        deadline = time.monotonic() + 120
        while "completed" not in badge(page):
            assert time.monotonic() < deadline, page.inner_text("main")
            try:
                request = pending_request(page)
            except sync_api.Error:  # it reloaded itself meanwhile
                continue
            if request is None:
                time.sleep(0.3)
                visit(page, run_url)
                continue
            # Read from the page what the agent was asked, and answer it as the agent would.
            answer = fake_answer(
                {**request_document(workdir, request["request_id"]), "prompt": request["prompt"]}
            )
            form = page.query_selector(f"#ask-{request['request_id']} form")
            form.query_selector("input[value=text]").check()
            form.query_selector("textarea").fill(answer)
            form.query_selector("button").click()
            page.wait_for_load_state("load")
            answered += 1
        page.screenshot(path=str(tmp_path / "completed.png"), full_page=True)
        timeline = page.inner_text("pre.timeline")
        assert "phase 9 template_validation: done" in timeline
        # Every ask of the run was answered through the page, once.
        asks = [line for line in timeline.splitlines() if " ask " in line]
        assert len(asks) == answered >= 5
        assert all("completed: answered" in line for line in asks)
    assert problems == []
    assert (workdir / "template" / "CLAUDE.md").is_file()


def request_document(workdir: Path, request_id: str) -> dict[str, Any]:
    """The request as the host reads it (the fake agent answers from all of it)."""
    import json

    from support.cli import orchestrate

    for item in json.loads(orchestrate("pending", "--workdir", workdir, "--json").stdout):
        if item["request"]["request_id"] == request_id:
            return dict(item["request"])
    raise AssertionError(f"{request_id} is not pending")


def test_the_board_page_shows_the_tasks_move(tmp_path: Path) -> None:
    workdir = tmp_path / "board-work"
    workdir.mkdir()
    # The tasks end a second apart, so the page (refreshed each second) sees them move
    # however fast the machine runs them.
    env = cli.child_env({"FAKE_SUBAGENT_STAGGER": "1"})
    drive = subprocess.Popen(
        cli.command(
            "drive",
            f"{REPO / 'examples' / 'task_board' / 'workflow.py'}:TaskBoardDemo",
            "--workdir",
            str(workdir),
            "--handler",
            f"{sys.executable} {REPO / 'examples' / 'task_board' / 'fake_subagent.py'}",
            "--handler-timeout",
            "10",  # above the longest stagger: only the hang is cut
        ),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    problems: list[str] = []
    seen: list[dict[str, int]] = []
    try:
        deadline = time.monotonic() + 60
        while not (workdir / ".board" / "board.json").exists():
            assert time.monotonic() < deadline and drive.poll() is None
            time.sleep(0.1)
        with serving(workdir) as served, browser_page(served, problems) as page:
            page.goto(served.url)
            page.goto(served.origin + "/board?dir=0")
            while drive.poll() is None and time.monotonic() < deadline + 60:
                seen.append(columns(page))
                time.sleep(0.25)
            page.wait_for_timeout(1500)  # the page's own refresh shows the end
            seen.append(columns(page))
            page.screenshot(path=str(tmp_path / "board.png"), full_page=True)
    finally:
        drive.kill()
        drive.wait()
    assert problems == []
    assert drive.returncode is not None
    assert any(s.get("in_progress") for s in seen), seen  # tasks were seen at work
    assert seen[-1].get("done", 0) >= 1 and not seen[-1].get("in_progress"), seen[-1]
    assert len({tuple(sorted(s.items())) for s in seen}) >= 3  # and seen to move


def columns(page: Any) -> dict[str, int]:
    return {
        section.get_attribute("data-status"): len(section.query_selector_all("li.task"))
        for section in page.query_selector_all("section.column")
    }


def test_a_json_answer_is_checked_against_the_shape_the_request_asks_for(tmp_path: Path) -> None:
    from support.cli import orchestrate

    workdir = tmp_path / "review"
    workdir.mkdir()
    flow = f"{REPO / 'tests' / 'support' / 'ui_flows.py'}:Review"
    assert orchestrate("run", flow, "--workdir", workdir).returncode == 42
    problems: list[str] = []
    with serving(workdir) as served, browser_page(served, problems) as page:
        page.goto(served.url)
        page.click("table.runs a")
        run_url = page.url
        form = page.query_selector("form.answer")
        assert form.query_selector("input[value=json]").is_checked()
        area, said = form.query_selector("textarea"), form.query_selector(".check")
        for typed, words in (
            ('{"verdict": "ok"}', 'missing "score"'),
            ('{"verdict": "ok", "score": "7"}', "$.score: expected an integer, got string"),
            ('{"verdict": "ok", "score": 7, "mood": 1}', 'unknown field "mood"'),
            ('{"verdict": "ok", "score": 7, "x_mood": 1}', "valid JSON of the expected shape"),
        ):
            area.fill(typed)
            assert words in said.inner_text(), (typed, said.inner_text())
        form.query_selector("button").click()
        page.wait_for_load_state("load")
        deadline = time.monotonic() + 60
        while "completed" not in badge(page):
            assert time.monotonic() < deadline, page.inner_text("main")
            time.sleep(0.3)
            visit(page, run_url)
        page.screenshot(path=str(tmp_path / "shaped.png"), full_page=True)
    assert problems == []
    output = orchestrate("output", "--workdir", workdir, "review")
    assert '"score": 7' in output.stdout


def started_flow(workdir: Path, flow: str, **env: str) -> None:
    """A flow of ``tests/support/ui_flows.py`` started in ``workdir``, paused."""
    from support.cli import orchestrate

    workdir.mkdir(parents=True, exist_ok=True)
    done = orchestrate(
        "run", f"{REPO / 'tests' / 'support' / 'ui_flows.py'}:{flow}", "--workdir", workdir, env=env
    )
    assert done.returncode == 42, done.stderr


def test_a_sleeping_run_with_resume_ticked_completes_by_itself(tmp_path: Path) -> None:
    # One run sleeps for long (what the page shows while it sleeps); one for a second
    # (it is due by the time the page is seen, or soon after, however slow the machine).
    started_flow(tmp_path / "long", "Nap", ORCHESTRATOR_TEST_NAP="3600")
    started_flow(tmp_path / "short", "Nap", ORCHESTRATOR_TEST_NAP="1")
    problems: list[str] = []
    with (
        serving(tmp_path / "long", tmp_path / "short") as served,
        browser_page(served, problems) as page,
    ):
        page.goto(served.url)
        visit(page, served.origin + "/run?" + run_query(tmp_path / "long", 0))
        sleep = page.wait_for_selector("section.sleep")
        assert "sleeping until" in sleep.inner_text()
        assert sleep.query_selector("input[name=resume]").is_checked()
        page.wait_for_function("document.querySelector('.countdown').textContent.includes('min')")
        page.screenshot(path=str(tmp_path / "sleeping.png"), full_page=True)
        # Nobody clicks: the page resumes the run once due, and shows it end.
        run_url = served.origin + "/run?" + run_query(tmp_path / "short", 1)
        visit(page, run_url)
        deadline = time.monotonic() + 90
        while "completed" not in badge(page):
            assert time.monotonic() < deadline, page.inner_text("main")
            page.wait_for_timeout(300)
        page.screenshot(path=str(tmp_path / "woken.png"), full_page=True)
        assert "phase 2 wake: done" in page.inner_text("pre.timeline")
    assert problems == []


def run_query(workdir: Path, index: int) -> str:
    from urllib.parse import urlencode

    from support.cli import orchestrate

    status = json.loads(orchestrate("status", "--workdir", workdir, "--json").stdout)
    return urlencode({"dir": index, "run": status["run_id"]})


def test_a_wrong_shape_is_refused_in_place_and_the_shape_is_shown(tmp_path: Path) -> None:
    workdir = tmp_path / "review"
    started_flow(workdir, "Review")
    problems: list[str] = []
    with serving(workdir) as served, browser_page(served, problems) as page:
        page.goto(served.url)
        page.click("table.runs a")
        shape = page.inner_text("article.ask details.shape")
        for words in ("verdict", "score", "notes", "an integer", "required"):
            assert words in shape, shape
        example = json.loads(page.inner_text("article.ask pre.example"))
        assert set(example) == {"verdict", "score", "notes"}
        # The page's own check would stop it: send it as a person who pays no heed would.
        form = page.query_selector("form.answer")
        form.query_selector("textarea").fill('{"verdict": "ok", "score": "seven"}')
        form.evaluate("f => f.submit()")
        page.wait_for_load_state("load")
        refused = page.inner_text("article.ask .refused")
        assert "response.score" in refused and "an integer" in refused, refused
        assert page.query_selector(".notice") is None
        assert "the run resumes" not in page.inner_text("main")
        assert "seven" in page.input_value("article.ask textarea")  # the draft is kept
        page.screenshot(path=str(tmp_path / "refused-shape.png"), full_page=True)
    assert problems == []
    assert not (workdir / ".agent-response.json").exists()
