"""The routes of ``orchestrate ui`` (Starlette).

GET  /                      runs, filtered by status, paged
GET  /run?dir=&run=         a run: what it waits for (a form per request), timeline,
                            outputs, events, evidence; ``view=events`` streams its events
                            (server-sent events), ``view=file&path=`` shows an evidence file
POST /answer                an answer, through ``orchestrate respond``'s validation; then,
                            if asked and nothing else is pending, ``orchestrate resume``
POST /retry, /rewind        the recovery actions of a failed run
POST /wake                  a run asleep on a timer: resume it when it is due (or not)
POST /signal                a signal for a run waiting for one, through ``orchestrate
                            signal``'s answer gate; then, if asked, ``orchestrate resume``
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
from urllib.parse import quote, urlencode

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

from ..._errors import OrchestratorError
from ..._text import plural
from ...storage.runs import is_run_id
from . import pages
from .guard import COOKIE, CSP, REPORT_CSP, Guard
from .places import LoadedRun, Place
from .reports import comparisons, regression_file
from .runs import RunRef, RunRow
from .shapes import Sleep
from .waker import Waker, spawn_resume, wake_time

STATIC = Path(__file__).with_name("static")
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
PER_PAGE = 50
EVENT_POLL = 0.3


def make_app(places: Sequence[Place], guard: Guard) -> Starlette:
    """The app serving ``places`` (work directories, a store), guarded by ``guard``."""
    handlers = _Handlers(list(places), guard)
    return Starlette(
        routes=handlers.routes(),
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=_guarded(guard))],
    )


def _guarded(guard: Guard) -> Any:
    """The middleware that admits a request only at this server's address and with the
    token, and sets the headers on every answer, an error's too."""

    async def guarded(request: Request, call_next: Any) -> Response:
        response = await _admitted(request, call_next, guard)
        policy = response.headers.get("x-report-policy")
        if policy is not None:
            del response.headers["x-report-policy"]
        response.headers["Content-Security-Policy"] = policy or CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        # Not "no-referrer": a browser then sends "Origin: null" with the page's own forms.
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = response.headers.get("Cache-Control", "no-store")
        return response

    return guarded


async def _admitted(request: Request, call_next: Any, guard: Guard) -> Response:
    """The answer to ``request``: a refusal, the token's move into a cookie, or the page."""
    if not guard.host_ok(request.headers.get("host")):
        return PlainTextResponse(
            "misdirected: this server answers to its own address only "
            f"(http://127.0.0.1:{guard.port}/ or http://localhost:{guard.port}/)",
            status_code=421,
        )
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
        return _token_to_cookie(request, guard)
    try:
        response: Response = await call_next(request)
    except Exception as exc:  # a page that failed: one line, never a traceback
        print(f"orchestrate ui: {request.url.path}: {_one_line(exc)}", file=sys.stderr)
        return HTMLResponse(
            pages.page("Error", "<p class='failure'>this page failed; see the server's log</p>"),
            status_code=500,
        )
    return response


def _token_to_cookie(request: Request, guard: Guard) -> Response:
    """The token moves into a cookie, and out of the address bar and the history: the
    same page again, at a path of this server only (one ``/``, never ``//`` or ``/\\``,
    which a browser takes for another host)."""
    path = str(request.scope["path"])  # decoded: "/%2F..." is "//..." here
    if not path.startswith("/") or path[1:2] in ("/", "\\"):
        return _not_found()
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    target = quote(path) + ("?" + urlencode(query) if query else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, guard.token, httponly=True, samesite="strict")
    return response


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]


class _Handlers:
    """The pages and forms of the app, over ``places`` (work directories, a store)."""

    def __init__(self, places: list[Place], guard: Guard) -> None:
        self.places = places
        self.guard = guard
        self.workdirs = [p.workdir for p in places if p.workdir is not None]
        self.waker = Waker(places)

    def routes(self) -> list[Route]:
        """Each address and the handler that answers it."""
        return [
            Route("/", self.runs),
            Route("/run", self.run),
            Route("/answer", self.answer, methods=["POST"]),
            Route("/retry", self.recover, methods=["POST"]),
            Route("/rewind", self.recover, methods=["POST"]),
            Route("/wake", self.wake, methods=["POST"]),
            Route("/signal", self.signal, methods=["POST"]),
            Route("/boards", self.boards),
            Route("/board", self.board),
            Route("/worklog", self.worklog),
            Route("/evals", self.evals),
            Route("/evals/{dir}/{path:path}", self.eval_file),
            Route("/static/{name}", self.static),
        ]

    def all_rows(self) -> list[RunRow]:
        rows = [row for i, place in enumerate(self.places) for row in place.rows(i)]
        return sorted(rows, key=lambda r: r.updated, reverse=True)

    async def runs(self, request: Request) -> Response:
        status = request.query_params.get("status") or None
        number = _int(request.query_params.get("page"), 0)
        rows = await asyncio.to_thread(self.all_rows)
        return HTMLResponse(
            pages.runs_page(rows, status=status, page_number=number, per_page=PER_PAGE)
        )

    async def run(self, request: Request) -> Response:
        ref = _ref(request.query_params, self.places)
        if ref is None:
            return _not_found()
        place = self.places[ref.directory]
        view = request.query_params.get("view")
        if view == "events":
            try:
                await asyncio.to_thread(place.load, ref.run_id)
            except (OrchestratorError, OSError):
                return _not_found()
            return StreamingResponse(
                _events(place, ref, _int(request.query_params.get("after"), 0)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store"},
            )
        if view == "file":
            return await asyncio.to_thread(
                _evidence, place, ref, request.query_params.get("path", "")
            )
        notice = request.query_params.get("notice")
        return await asyncio.to_thread(
            _run_page, place, ref, self.guard, notice=notice, waker=self.waker
        )

    async def posted(self, request: Request) -> tuple[Any, RunRef] | Response:
        """The form of a POST and the run it names, or the refusal to send back: nothing
        is done to a run whose state does not hold its signature."""
        form = await request.form()
        if not self.guard.form_token_ok(str(form.get("csrf", "")) or None):
            return _forbidden("the form's token is missing or wrong: reload the page")
        ref = _ref(form, self.places)
        if ref is None:
            return _not_found()
        try:
            loaded = await asyncio.to_thread(self.places[ref.directory].load, ref.run_id)
        except (OrchestratorError, OSError):
            return _not_found()
        if loaded.problem:
            return PlainTextResponse(
                f"refused, nothing was done: the run's signature is NOT VALID "
                f"({loaded.problem}); check its state, then sign it with "
                f"'orchestrate trust {loaded.source}'",
                status_code=409,
            )
        return form, ref

    async def answer(self, request: Request) -> Response:
        taken = await self.posted(request)
        if isinstance(taken, Response):
            return taken
        form, ref = taken
        fields = {k: str(form.get(k, "")) for k in ("request", "mode", "answer", "resume")}
        place = self.places[ref.directory]
        return await asyncio.to_thread(_answer, place, ref, self.guard, fields, self.waker)

    async def signal(self, request: Request) -> Response:
        """Send a signal to the run (its payload JSON, checked at the door)."""
        taken = await self.posted(request)
        if isinstance(taken, Response):
            return taken
        form, ref = taken
        fields = {k: str(form.get(k, "")) for k in ("name", "payload", "resume")}
        place = self.places[ref.directory]
        return await asyncio.to_thread(_signal, place, ref, self.guard, fields, self.waker)

    async def wake(self, request: Request) -> Response:
        """Resume a sleeping run when its timer is due (``resume`` ticked), or not."""
        taken = await self.posted(request)
        if isinstance(taken, Response):
            return taken
        form, ref = taken
        if not form.get("resume"):
            self.waker.unmark(ref)
            return _back(ref, "the run sleeps on: 'orchestrate resume' wakes it once due")
        said = await asyncio.to_thread(self.waker.ask, ref)
        return _back(ref, said or "the run is being resumed already")

    async def recover(self, request: Request) -> Response:
        taken = await self.posted(request)
        if isinstance(taken, Response):
            return taken
        form, ref = taken
        action = request.url.path.strip("/")
        argv = ["retry"] if action == "retry" else ["rewind", "--to", str(form.get("to", ""))]
        naming = self.places[ref.directory].command(ref.run_id)
        if "--run" in naming:  # retry's and rewind's --run is their own option
            naming = naming[: naming.index("--run")]
            argv += ["--run", ref.run_id]
        done = await asyncio.to_thread(_orchestrate, [*argv, *naming])
        said = (done.stderr.strip().splitlines() or ["done"])[-1].removeprefix("orchestrate: ")
        return _back(ref, said)

    async def boards(self, request: Request) -> Response:
        found = await asyncio.to_thread(
            lambda: [(i, b, p.label) for i, p in enumerate(self.places) for b in p.boards()]
        )
        return HTMLResponse(pages.boards_page(found))

    async def board(self, request: Request) -> Response:
        index = _int(request.query_params.get("dir"), -1)
        board_id = request.query_params.get("board", "")
        if not 0 <= index < len(self.places):
            return _not_found()
        try:
            snapshot = await asyncio.to_thread(board_snapshot, self.places[index], board_id)
        except (OrchestratorError, OSError):
            return _not_found()
        if request.query_params.get("view") == "json":
            return JSONResponse({"html": pages.board_columns(index, board_id, snapshot)})
        return HTMLResponse(pages.board_page(index, board_id, snapshot))

    async def worklog(self, request: Request) -> Response:
        index = _int(request.query_params.get("dir"), -1)
        board_id = request.query_params.get("board", "")
        task_id = request.query_params.get("task", "")
        if not 0 <= index < len(self.places):
            return _not_found()
        try:
            entries = await asyncio.to_thread(board_worklog, self.places[index], board_id, task_id)
        except (OrchestratorError, OSError):
            return _not_found()
        return HTMLResponse(pages.worklog_page(index, board_id, task_id, entries))

    async def evals(self, request: Request) -> Response:
        found = await asyncio.to_thread(comparisons, self.workdirs)
        return HTMLResponse(pages.evals_page(found, self.workdirs))

    async def eval_file(self, request: Request) -> Response:
        index = _int(request.path_params["dir"], -1)
        if not 0 <= index < len(self.workdirs):
            return _not_found()
        relative = request.path_params["path"]
        data = await asyncio.to_thread(regression_file, self.workdirs[index], relative)
        if data is None:
            return _not_found()
        if relative.endswith(".html"):
            # The report stands alone: its own styles, no script, nothing from elsewhere.
            response = Response(data, media_type="text/html; charset=utf-8")
            response.headers["X-Report-Policy"] = REPORT_CSP
            return response
        kind = "application/json" if relative.endswith(".json") else "text/plain"
        return Response(data, media_type=f"{kind}; charset=utf-8")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in {p.name for p in STATIC.iterdir()}:
            return _not_found()
        path = STATIC / name
        return Response(path.read_bytes(), media_type=STATIC_TYPES.get(path.suffix, "text/plain"))


# -- handlers run in a thread (they read and write files) ---------------------------------


def _run_page(
    place: Place,
    ref: RunRef,
    guard: Guard,
    *,
    notice: str | None = None,
    refused: dict[str, str] | None = None,
    drafts: dict[str, str] | None = None,
    waker: Waker | None = None,
) -> Response:
    try:
        loaded = place.load(ref.run_id)
        html = _run_html(place, ref, loaded, guard, waker, notice, refused, drafts)
    except (OrchestratorError, OSError) as exc:
        return HTMLResponse(pages.page("Run", f"<p class='failure'>{escape(str(exc))}</p>"), 404)
    return HTMLResponse(html)


def _run_html(
    place: Place,
    ref: RunRef,
    loaded: LoadedRun,
    guard: Guard,
    waker: Waker | None,
    notice: str | None,
    refused: dict[str, str] | None,
    drafts: dict[str, str] | None,
) -> str:
    from ...evidence.history import timeline
    from ..event_lines import describe_event
    from ..instance import describe_ended, summarize_state

    state, source = loaded.state, loaded.source
    record = state.phase_data.get("x_orchestrator") or {}
    if record.get("status") in ("completed", "cancelled"):
        summary = describe_ended(state, source=source)
    else:
        summary = summarize_state(state, source=source, answer_at=lambda rid: rid)
    pending = [r.request_id for r in state.agent_requests if r.status.value == "pending"]
    events = [
        (seq, describe_event(json.loads(line), seq=seq))
        for seq, line, _ in place.event_reader(ref.run_id)()[-200:]
    ]
    # A state whose signature fails is only shown: what of it is answered is not asked
    # (the store reads nothing more of such a state).
    answered = frozenset() if loaded.problem else place.answered(ref.run_id, pending)
    return pages.run_page(
        ref,
        events=events,
        answered=answered,
        state=state,
        summary=summary,
        timeline=timeline(state),
        files=place.files(ref.run_id),
        csrf=guard.csrf,
        notice=notice,
        refused=refused,
        drafts=drafts,
        sleep=_sleep(place, ref, state, waker),
        untrusted=_untrusted(loaded) if loaded.problem else None,
    )


def _untrusted(loaded: LoadedRun) -> str:
    """What the page says of a state whose signature does not hold."""
    return (
        f"signature NOT VALID: {loaded.problem}. This run's state is shown as it is on "
        "disk, and nothing can be done to it from here: no answer, retry, rewind or wake. "
        f"If you changed it yourself and checked it, 'orchestrate trust {loaded.source}' "
        "signs it."
    )


def _sleep(place: Place, ref: RunRef, state: Any, waker: Waker | None) -> Sleep | None:
    """The run's timer as the page shows it, if it sleeps on one."""
    wake = wake_time(state)
    if wake is None:
        return None
    until = str((state.phase_data.get("x_orchestrator") or {}).get("waiting_until"))
    marked = waker is not None and waker.marked(ref)
    declined = waker is not None and waker.declined(ref)
    return Sleep(until=until, marked=marked, declined=declined, store=place.workdir is None)


def _answer(
    place: Place, ref: RunRef, guard: Guard, fields: dict[str, str], waker: Waker
) -> Response:
    from ...formats.strict_json import dumps_canonical, loads_strict

    request_id, text = fields["request"], fields["answer"]
    try:
        if fields["mode"] == "json":
            value = loads_strict(text.encode("utf-8"), source="the answer")
            text = dumps_canonical(value).decode("utf-8")
        waiting = place.answer(ref.run_id, request_id, text)
    except (OrchestratorError, OSError, UnicodeError) as exc:
        return _run_page(
            place,
            ref,
            guard,
            refused={request_id: refusal_text(exc)},
            drafts={request_id: fields["answer"]},
            waker=waker,
        )  # 200: the page itself is fine (a 4xx would be a console error in the browser)
    if fields["resume"] and not waiting:
        spawn_resume(place, ref.run_id)  # the run goes on as a host's resume would
        return _back(ref, "answered; the run resumes")
    left = (
        f"; {plural(waiting, 'request')} still {'waits' if waiting == 1 else 'wait'}"
        if waiting
        else ""
    )
    return _back(ref, f"answered{left}")


def _signal(
    place: Place, ref: RunRef, guard: Guard, fields: dict[str, str], waker: Waker
) -> Response:
    from ...formats.strict_json import loads_strict

    name, text = fields["name"], fields["payload"]
    try:
        payload = loads_strict(text.encode("utf-8"), source="the payload") if text.strip() else None
        place.signal(ref.run_id, name, payload)
    except (OrchestratorError, OSError, UnicodeError) as exc:
        return _run_page(
            place,
            ref,
            guard,
            refused={f"signal {name}": refusal_text(exc)},
            drafts={f"signal {name}": text},
            waker=waker,
        )  # 200: the page itself is fine
    if fields["resume"]:
        spawn_resume(place, ref.run_id)
        return _back(ref, f"signal {name} sent; the run resumes")
    return _back(ref, f"signal {name} sent")


def refusal_text(exc: BaseException) -> str:
    """Why an answer was refused, for the page: the field, what was expected and what
    came when the answer's shape was wrong; the whole message otherwise."""
    details = getattr(exc, "details", None) or {}
    refusal = details.get("refusal") if isinstance(details, dict) else None
    if isinstance(refusal, dict) and refusal.get("field"):
        said = f"{refusal['field']}: expected {refusal.get('expected')}, got {refusal.get('got')}"
        return f"refused, nothing was written: {said}; correct the answer and send it again"
    return f"refused, nothing was written: {exc}"


def _evidence(place: Place, ref: RunRef, relative: str) -> Response:
    data = place.read_file(ref.run_id, relative)
    if data is None:
        return _not_found()
    kind = "application/json" if relative.endswith(".json") else "text/plain"
    return Response(data, media_type=f"{kind}; charset=utf-8")


async def _events(place: Place, ref: RunRef, after: int) -> AsyncIterator[bytes]:
    """The run's events after ``after``, then each new one, until ``run.end``."""
    read_new = place.event_reader(ref.run_id)
    while True:
        try:
            found = await asyncio.to_thread(read_new)
        except (OrchestratorError, OSError):
            yield b"event: end\ndata: {}\n\n"  # the events cannot be read (any more)
            return
        for seq, line, name in found:
            if seq > after:
                yield b"data: " + line + b"\n\n"
            if name == "run.end":
                yield b"event: end\ndata: {}\n\n"
                return
        await asyncio.sleep(EVENT_POLL)


def board_snapshot(place: Place, board_id: str) -> dict[str, Any]:
    """A board as its page shows it: tasks by status, the ledger's last lines."""
    board, lines = place.board(board_id)
    try:
        return _snapshot_of(board, lines, where=f"{place.label} {board_id}".strip())
    finally:
        board.store.close()


def board_worklog(place: Place, board_id: str, task_id: str) -> list[dict[str, Any]]:
    """The entries of one task's worklog, as the board keeps them."""
    board, _ = place.board(board_id)
    try:
        entries: list[dict[str, Any]] = board.worklog(task_id)
        return entries
    finally:
        board.store.close()


def _snapshot_of(board: Any, lines: list[bytes], *, where: str) -> dict[str, Any]:
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
    for line in reversed(lines):
        try:
            delta = json.loads(line)
        except ValueError:
            continue  # a line being appended
        if isinstance(delta, dict) and "x_ledger_snapshot" not in delta:  # not a delta
            tail.append(delta)
    return {"where": where, "columns": columns, "ledger_tail": tail}


# -- small helpers ------------------------------------------------------------------------


def _orchestrate(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _ref(params: Any, places: Sequence[Place]) -> RunRef | None:
    index = _int(params.get("dir"), -1)
    run_id = str(params.get("run") or "")
    if not 0 <= index < len(places) or not is_run_id(run_id):
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
