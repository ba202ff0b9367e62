"""The routes of ``orchestrate ui`` (Starlette).

GET  /                      runs, filtered by status, paged
GET  /run?dir=&run=         a run: what it waits for (a form per request), timeline,
                            outputs, events, evidence; ``view=events`` streams its events
                            (server-sent events), ``view=file&path=`` shows an evidence file
POST /answer                an answer, through ``orchestrate respond``'s validation; then,
                            if asked and nothing else is pending, ``orchestrate resume``
POST /retry, /rewind        the recovery actions of a failed run
GET  /boards, /board?dir=   task boards; ``view=json`` is what the page refreshes from
GET  /static/...            the page's script and style, shipped in the package
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from html import escape
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from ..._errors import ContractError, OrchestratorError
from ...storage.runs import is_run_id, runs_dir
from . import pages
from .guard import COOKIE, CSP, REPORT_CSP, Guard, read_evidence
from .runs import RunIndex, RunRef, eval_reports, load, served

STATIC = Path(__file__).with_name("static")
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
PER_PAGE = 50
EVENT_POLL = 0.3


def make_app(workdirs: Sequence[Path], guard: Guard) -> Starlette:
    """The app serving ``workdirs`` (resolved), guarded by ``guard``."""
    workdirs = list(workdirs)
    index = RunIndex(workdirs)

    async def runs(request: Request) -> Response:
        status = request.query_params.get("status") or None
        number = _int(request.query_params.get("page"), 0)
        rows = await asyncio.to_thread(index.rows)
        return HTMLResponse(
            pages.runs_page(rows, status=status, page_number=number, per_page=PER_PAGE)
        )

    async def run(request: Request) -> Response:
        ref = _ref(request.query_params)
        if ref is None:
            return _not_found()
        view = request.query_params.get("view")
        if view == "events":
            return StreamingResponse(
                _events(workdirs, ref, _int(request.query_params.get("after"), 0)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store"},
            )
        if view == "file":
            return await asyncio.to_thread(
                _evidence, workdirs, ref, request.query_params.get("path", "")
            )
        notice = request.query_params.get("notice")
        return await asyncio.to_thread(_run_page, workdirs, ref, guard, notice=notice)

    async def answer(request: Request) -> Response:
        form = await request.form()
        if not guard.form_token_ok(str(form.get("csrf", "")) or None):
            return _forbidden("the form's token is missing or wrong: reload the page")
        ref = _ref(form)
        if ref is None:
            return _not_found()
        fields = {k: str(form.get(k, "")) for k in ("request", "mode", "answer", "resume")}
        return await asyncio.to_thread(_answer, workdirs, ref, guard, fields)

    async def recover(request: Request) -> Response:
        form = await request.form()
        if not guard.form_token_ok(str(form.get("csrf", "")) or None):
            return _forbidden("the form's token is missing or wrong: reload the page")
        ref = _ref(form)
        if ref is None:
            return _not_found()
        action = request.url.path.strip("/")
        argv = ["retry"] if action == "retry" else ["rewind", "--to", str(form.get("to", ""))]
        workdir = served(workdirs, ref.directory)
        done = await asyncio.to_thread(_orchestrate, [*argv, "--workdir", str(workdir)])
        said = (done.stderr.strip().splitlines() or ["done"])[-1].removeprefix("orchestrate: ")
        return _back(ref, said)

    async def boards(request: Request) -> Response:
        found = [
            (i, str(w)) for i, w in enumerate(workdirs) if (w / ".board" / "board.json").is_file()
        ]
        return HTMLResponse(pages.boards_page(found))

    async def board(request: Request) -> Response:
        index = _int(request.query_params.get("dir"), -1)
        if not 0 <= index < len(workdirs) or not (workdirs[index] / ".board").is_dir():
            return _not_found()
        snapshot = await asyncio.to_thread(board_snapshot, workdirs[index] / ".board")
        if request.query_params.get("view") == "json":
            return JSONResponse({"html": pages.board_columns(snapshot)})
        return HTMLResponse(pages.board_page(index, snapshot))

    async def evals(request: Request) -> Response:
        reports = await asyncio.to_thread(eval_reports, workdirs)
        return HTMLResponse(pages.evals_page(reports, workdirs))

    async def eval_file(request: Request) -> Response:
        index = _int(request.path_params["dir"], -1)
        if not 0 <= index < len(workdirs):
            return _not_found()
        relative = request.path_params["path"]
        data = await asyncio.to_thread(read_evidence, workdirs[index], relative)
        if data is None:
            return _not_found()
        if relative.endswith(".html"):
            # The report stands alone: its own styles, no script, nothing from elsewhere.
            response = Response(data, media_type="text/html; charset=utf-8")
            response.headers["X-Report-Policy"] = REPORT_CSP
            return response
        kind = "application/json" if relative.endswith(".json") else "text/plain"
        return Response(data, media_type=f"{kind}; charset=utf-8")

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in {p.name for p in STATIC.iterdir()}:
            return _not_found()
        path = STATIC / name
        return Response(path.read_bytes(), media_type=STATIC_TYPES.get(path.suffix, "text/plain"))

    routes = [
        Route("/", runs),
        Route("/run", run),
        Route("/answer", answer, methods=["POST"]),
        Route("/retry", recover, methods=["POST"]),
        Route("/rewind", recover, methods=["POST"]),
        Route("/boards", boards),
        Route("/board", board),
        Route("/evals", evals),
        Route("/evals/{dir}/{path:path}", eval_file),
        Route("/static/{name}", static),
    ]

    async def guarded(request: Request, call_next: Any) -> Response:
        token = request.query_params.get("token")
        if not guard.admits(request.cookies.get(COOKIE), token):
            return _forbidden("this page needs the link orchestrate ui printed (its token)")
        if request.method == "POST" and not (
            guard.same_origin_post(
                request.headers.get("origin"),
                request.headers.get("sec-fetch-site"),
                request.headers.get("host", ""),
            )
        ):
            return _forbidden("a change must come from a page of this server")
        if token is not None and request.method == "GET":
            # The token moves into a cookie, and out of the address bar and the history.
            query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (
                "?" + "&".join(f"{k}={v}" for k, v in query) if query else ""
            )
            response: Response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, guard.token, httponly=True, samesite="strict")
        else:
            response = await call_next(request)
        policy = response.headers.get("x-report-policy")
        if policy is not None:
            del response.headers["x-report-policy"]
        response.headers["Content-Security-Policy"] = policy or CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        # Not "no-referrer": a browser then sends "Origin: null" with the page's own forms.
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = response.headers.get("Cache-Control", "no-store")
        return response

    return Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=guarded)])


# -- handlers run in a thread (they read and write files) ---------------------------------


def _run_page(
    workdirs: Sequence[Path],
    ref: RunRef,
    guard: Guard,
    *,
    notice: str | None = None,
    refused: dict[str, str] | None = None,
    drafts: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    from ...evidence.history import timeline
    from ..instance import describe_ended, summarize_state

    try:
        state, source, _live = load(workdirs, ref)
    except (OrchestratorError, OSError) as exc:
        return HTMLResponse(pages.page("Run", f"<p class='failure'>{escape(str(exc))}</p>"), 404)
    record = state.phase_data.get("x_orchestrator") or {}
    if record.get("status") in ("completed", "cancelled"):
        summary = describe_ended(state, source=source)
    else:
        summary = summarize_state(state, source=source, answer_at=lambda rid: rid)
    run_dir = runs_dir(served(workdirs, ref.directory)) / ref.run_id
    files = sorted(
        str(p.relative_to(run_dir))
        for p in run_dir.rglob("*")
        if p.is_file() and not p.is_symlink()
    )[:500]
    workdir = served(workdirs, ref.directory)
    answered = frozenset(
        r.request_id
        for r in state.agent_requests
        if r.status.value == "pending" and _answered(workdir, r.request_id)
    )
    html = pages.run_page(
        ref,
        answered=answered,
        state=state,
        summary=summary,
        timeline=timeline(state),
        files=files,
        csrf=guard.csrf,
        notice=notice,
        refused=refused,
        drafts=drafts,
    )
    return HTMLResponse(html, status_code=status_code)


def _answer(
    workdirs: Sequence[Path], ref: RunRef, guard: Guard, fields: dict[str, str]
) -> Response:
    from ...formats.strict_json import dumps_canonical, loads_strict
    from ..instance import pending_of, write_response

    request_id, text = fields["request"], fields["answer"]
    try:
        _state, _source, live = load(workdirs, ref)
        if live is None:
            raise ContractError("the run is not live: there is nothing to answer", source="run")
        if fields["mode"] == "json":
            value = loads_strict(text.encode("utf-8"), source="the answer")
            text = dumps_canonical(value).decode("utf-8")
        write_response(live, request_id=request_id, text=text)
    except (OrchestratorError, OSError, UnicodeError) as exc:
        return _run_page(
            workdirs,
            ref,
            guard,
            refused={request_id: f"refused, nothing was written: {exc}"},
            drafts={request_id: fields["answer"]},
        )  # 200: the page itself is fine (a 4xx would be a console error in the browser)
    workdir = served(workdirs, ref.directory)
    unanswered = [
        item
        for item in pending_of(workdir)
        if not _answered(workdir, item["request"]["request_id"])
    ]
    if fields["resume"] and not unanswered:
        subprocess.Popen(  # the run goes on as a host's resume would; the page shows it
            [sys.executable, "-m", "orchestrator", "resume", "--workdir", str(workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return _back(ref, "answered; the run resumes")
    left = f"; {len(unanswered)} request(s) still wait" if unanswered else ""
    return _back(ref, f"answered{left}")


def _answered(workdir: Path, request_id: str) -> bool:
    from ...formats.bridge import RESPONSE_FILE, RESPONSES_DIR

    if (workdir / RESPONSES_DIR / f"{request_id}.json").is_file():
        return True
    try:
        document = json.loads((workdir / RESPONSE_FILE).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and document.get("request_id") == request_id


def _evidence(workdirs: Sequence[Path], ref: RunRef, relative: str) -> Response:
    run_dir = runs_dir(served(workdirs, ref.directory)) / ref.run_id
    data = read_evidence(run_dir, relative)
    if data is None:
        return _not_found()
    kind = "application/json" if relative.endswith(".json") else "text/plain"
    return Response(data, media_type=f"{kind}; charset=utf-8")


async def _events(workdirs: Sequence[Path], ref: RunRef, after: int) -> AsyncIterator[bytes]:
    """The run's events after ``after``, then each new one, until ``run.end``."""
    from ..events import EventTail

    path = runs_dir(served(workdirs, ref.directory)) / ref.run_id / "events.ndjson"
    tail = EventTail(path)
    while True:
        try:
            fresh = await asyncio.to_thread(lambda: list(tail.read_new()))
        except (FileNotFoundError, ContractError):
            fresh = []
        for event in fresh:
            if event.seq > after:
                yield b"data: " + event.line + b"\n\n"
            if event.name == "run.end":
                yield b"event: end\ndata: {}\n\n"
                return
        await asyncio.sleep(EVENT_POLL)


def board_snapshot(directory: Path) -> dict[str, Any]:
    """A board as its page shows it: tasks by status, the ledger's last lines."""
    from ...board.board import Board

    board = Board(directory)
    state = board.state()
    columns: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(state.rows.values(), key=lambda r: r.created):
        columns.setdefault(row.status.value, []).append(
            {
                "task_id": row.task_id,
                "title": str(getattr(row.task, "title", "") or ""),
                "owner": row.owner,
                "locks": list(row.locks),
                "heartbeat": board.last_heartbeat(row)
                if row.status.value == "in_progress"
                else None,
            }
        )
    tail: list[dict[str, Any]] = []
    lines = _last_lines(directory / "ledger.ndjson", 30)
    for line in reversed(lines):
        try:
            delta = json.loads(line)
        except ValueError:
            continue  # a line being appended
        if isinstance(delta, dict):
            tail.append(delta)
    return {"where": str(directory), "columns": columns, "ledger_tail": tail}


def _last_lines(path: Path, count: int, *, window: int = 64 * 1024) -> list[bytes]:
    """The last ``count`` whole lines of ``path``, read from its end (a long ledger is
    not read whole for its tail)."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - window))
            chunk = file.read()
    except OSError:
        return []
    lines = chunk.splitlines()
    if size > window and lines:
        lines = lines[1:]  # the first may be cut
    return lines[-count:]


# -- small helpers ------------------------------------------------------------------------


def _orchestrate(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _ref(params: Any) -> RunRef | None:
    index = _int(params.get("dir"), -1)
    run_id = str(params.get("run") or "")
    if index < 0 or not is_run_id(run_id):
        return None
    return RunRef(directory=index, run_id=run_id)


def _int(text: Any, default: int) -> int:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return default


def _back(ref: RunRef, notice: str) -> Response:
    return RedirectResponse(pages.run_link(ref, notice=notice), status_code=303)


def _not_found() -> Response:
    return PlainTextResponse("not found", status_code=404)


def _forbidden(why: str) -> Response:
    return PlainTextResponse(f"forbidden: {why}", status_code=403)
