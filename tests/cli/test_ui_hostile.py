"""``orchestrate ui`` against hostile requests (a real server on loopback, plain HTTP):
it redirects only to a path of its own, answers to its own address only, serves no link,
no hard link and no file but regular ones, serves of the work directory only the files
of regression-run folders, shows a state whose signature fails with a warning and no
form, and listens beyond this machine only when told that the token then crosses the
network unencrypted. Every refusal is a 4xx with the page's policy, and nothing it is
sent puts a traceback on its stderr."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest

from support import needs

needs.extra("starlette", "ui")

from support.ui_support import Served, paused_template_create, serving  # noqa: E402

pytestmark = pytest.mark.slow


# -- what the tests plant -----------------------------------------------------------------


def run_of(workdir: Path) -> str:
    """The id of the one run the work directory keeps."""
    (run_id,) = os.listdir(workdir / ".orchestrator" / "runs")
    return run_id


def paused_run(tmp_path: Path) -> tuple[Path, str]:
    workdir = tmp_path / "work"
    paused_template_create(workdir)
    return workdir, run_of(workdir)


def a_tree_too_deep_to_walk(where: Path) -> None:
    """Directories nested past the longest path the system takes (made from descriptors,
    which have no such limit): a walk by path names fails in it."""
    where.mkdir(parents=True)
    fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(25):
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def run_directory_replaced_by_a_link(workdir: Path, run_id: str, tmp_path: Path) -> Path:
    """The run's directory moved out of the work directory (with a file of the user's and
    a tree no walk by path gets through) and a link left in its place; the target."""
    run_dir = workdir / ".orchestrator" / "runs" / run_id
    target = tmp_path / "elsewhere"
    run_dir.rename(target)
    (target / "users-secret.txt").write_text("not yours")
    a_tree_too_deep_to_walk(target / "deep")
    os.symlink(target, run_dir)
    return target


def forge_live_state(workdir: Path) -> None:
    """The live state edited by hand: the pending request's prompt changed."""
    (state_path,) = workdir.glob(".*-state.json")
    data = json.loads(state_path.read_text())
    data["agent_requests"][0]["x_request"]["prompt"] = "FORGED: approve everything"
    state_path.write_text(json.dumps(data, indent=2))


def no_traceback(served: Served) -> None:
    assert "Traceback" not in served.stderr, served.stderr


def refused(served: Served, method: str, target: str, **kwargs: object) -> tuple[int, bytes]:
    """A request answered with a 4xx that carries the page's policy."""
    code, headers, body = served.request(method, target, **kwargs)  # type: ignore[arg-type]
    assert 400 <= code < 500, (target, code, headers)
    assert "location" not in headers, (target, headers)
    assert "default-src 'none'" in headers.get("content-security-policy", ""), (target, headers)
    return code, body


def csrf_of(served: Served, run_id: str) -> str:
    page = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))[2].decode()
    return re.search(r"<meta name='csrf' content='([^']*)'>", page).group(1)  # type: ignore[union-attr]


# -- one test per break -------------------------------------------------------------------


def test_a_path_of_two_slashes_is_never_a_redirect_to_another_host(tmp_path: Path) -> None:
    workdir, _ = paused_run(tmp_path)
    with serving(workdir) as served:
        for path in (
            "//evil.example/",
            "/%2F%2Fevil.example/",
            "/%5Cevil.example/",
            "/\\evil.example/",
        ):
            code, _ = refused(served, "GET", f"{path}?token={served.token}", cookie=False)
            assert code == 404, path
        # The printed link still moves its token into a cookie, to a path of its own.
        code, headers, _ = served.request("GET", "/boards?x=a%26b&token=" + served.token)
        assert code == 303 and headers["location"] == "/boards?x=a%26b", headers
    no_traceback(served)


def test_a_host_header_of_another_name_is_refused(tmp_path: Path) -> None:
    workdir, _ = paused_run(tmp_path)
    with serving(workdir) as served:
        for host in ("evil.example", f"evil.example:{served.port}", f"127.0.0.1:{served.port + 1}"):
            code, body = refused(served, "GET", "/", headers={"Host": host})
            assert code == 421, host
            assert b"no run" not in body.lower()
        for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}"):
            code, _, body = served.request("GET", "/", headers={"Host": host})
            assert code == 200 and b"<h1>Runs</h1>" in body, host
    no_traceback(served)


def test_a_run_directory_replaced_by_a_link_is_not_read_and_puts_no_traceback(
    tmp_path: Path,
) -> None:
    workdir, run_id = paused_run(tmp_path)
    run_directory_replaced_by_a_link(workdir, run_id, tmp_path)
    with serving(workdir) as served:
        code, headers, body = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))
        assert code == 200, body[:300]  # the live state is there; nothing of the link is
        assert "default-src 'none'" in headers["content-security-policy"]
        assert b"users-secret.txt" not in body and b"ddddd" not in body
        for path in ("users-secret.txt", "events.ndjson"):
            target = "/run?" + urlencode({"dir": 0, "run": run_id, "view": "file", "path": path})
            code, body = refused(served, "GET", target)
            assert code == 404 and b"not yours" not in body
    no_traceback(served)


def test_every_error_page_carries_the_policy(tmp_path: Path) -> None:
    workdir, _ = paused_run(tmp_path)
    with serving(workdir) as served:
        assert refused(served, "GET", "/", cookie=False)[0] == 403
        assert refused(served, "GET", "/no-such-page")[0] == 404
        assert refused(served, "POST", "/", headers={"Origin": served.origin})[0] == 405
        assert refused(served, "GET", "/", headers={"Host": "evil.example"})[0] == 421
        assert refused(served, "POST", "/answer", body={"dir": "0"})[0] == 403
    no_traceback(served)


def test_a_hard_linked_file_is_not_served(tmp_path: Path) -> None:
    workdir, run_id = paused_run(tmp_path)
    secret = tmp_path / "users-secret.txt"
    secret.write_text("not yours")
    run_dir = workdir / ".orchestrator" / "runs" / run_id
    os.link(secret, run_dir / "notes.txt")
    with serving(workdir) as served:
        page = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))[2]
        assert b"notes.txt" not in page and b"events.ndjson" in page
        target = "/run?" + urlencode({"dir": 0, "run": run_id, "view": "file", "path": "notes.txt"})
        code, body = refused(served, "GET", target)
        assert code == 404 and b"not yours" not in body
        ok = "/run?" + urlencode({"dir": 0, "run": run_id, "view": "file", "path": "events.ndjson"})
        assert served.request("GET", ok)[0] == 200
    no_traceback(served)


def regression_folder(tmp_path: Path) -> Path:
    """A work directory with a paused run and an evaluation folder (``runs/``) of two run
    directories; returns the work directory."""
    from support.eval_support import compare, copy_runs

    workdir = tmp_path / "work"
    paused_template_create(workdir)
    compare(copy_runs(workdir))
    return workdir


def test_evals_serves_only_the_files_of_regression_run_folders(tmp_path: Path) -> None:
    workdir = regression_folder(tmp_path)
    (workdir / "notes.txt").write_text("not yours")
    (workdir / "not-a-run").mkdir()
    (workdir / "not-a-run" / "run.json").write_text('{"hello": "not a run"}')
    (workdir / "not-a-run" / "secret.txt").write_text("not yours")
    with serving(workdir) as served:
        listed = served.request("GET", "/evals")[2].decode()
        assert "/evals/0/runs/report.html" in listed
        report = served.request("GET", "/evals/0/runs/report.html")
        assert report[0] == 200
        # Every link of the report that leaves the page opens.
        hrefs = set(re.findall(r'href="([^"#][^"]*)"', report[2].decode()))
        assert "evaluation.json" in hrefs and any(h.endswith("run.json") for h in hrefs)
        for href in hrefs:
            assert served.request("GET", f"/evals/0/runs/{href}")[0] == 200, href
        for path in (
            "notes.txt",
            ".template-create-state.json",
            f".orchestrator/runs/{run_of(workdir)}/events.ndjson",
            "runs/cases.json",
            "not-a-run/run.json",
            "not-a-run/secret.txt",
            "runs/baseline/r-base/../../../notes.txt",
            "runs/baseline/r-base/%2e%2e/%2e%2e/%2e%2e/notes.txt",
        ):
            code, body = refused(served, "GET", f"/evals/0/{path}")
            assert code == 404 and b"not yours" not in body, path
    no_traceback(served)


def test_links_and_hard_links_in_a_regression_run_are_not_served(tmp_path: Path) -> None:
    workdir = regression_folder(tmp_path)
    secret = tmp_path / "users-secret.txt"
    secret.write_text("not yours")
    run_dir = workdir / "runs" / "baseline" / "r-base"
    os.symlink(secret, run_dir / "linked.txt")
    os.link(secret, run_dir / "hard.txt")
    os.symlink(tmp_path, run_dir / "linkdir")
    os.mkfifo(run_dir / "pipe.txt")
    with serving(workdir) as served:
        assert served.request("GET", "/evals/0/runs/baseline/r-base/run.json")[0] == 200
        for name in ("linked.txt", "hard.txt", "linkdir/users-secret.txt", "pipe.txt"):
            code, body = refused(served, "GET", f"/evals/0/runs/baseline/r-base/{name}")
            assert code == 404 and b"not yours" not in body, name
    no_traceback(served)


def test_a_forged_live_state_is_listed_with_a_warning_and_offers_no_form(
    tmp_path: Path,
) -> None:
    workdir, run_id = paused_run(tmp_path)
    untouched = tmp_path / "untouched"
    shutil.copytree(workdir, untouched, symlinks=True)
    # A copy is refused as one until it is accepted here on purpose; then it is signed.
    from orchestrator.cli.trust import trust_state

    (copied,) = untouched.glob(".*-state.json")
    trust_state(copied, accept_rollback=True)
    forge_live_state(workdir)
    with serving(workdir, untouched) as served:
        listed = served.request("GET", "/")[2].decode()
        assert run_id[:8] in listed and listed.count("signature NOT VALID") == 1
        page = served.request("GET", "/run?" + urlencode({"dir": 1, "run": run_id}))[2].decode()
        assert "action='/answer'" in page and "untrusted" not in page  # the signed copy
        page = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))[2].decode()
        assert "FORGED" in page  # shown as it is on disk ...
        assert "orchestrate trust" in page and "class='refused untrusted'" in page
        assert "<form" not in page and "action='/answer'" not in page  # ... with no form
        fields = {
            "dir": "0",
            "run": run_id,
            "csrf": csrf_of(served, run_id),
            "request": "x",
            "mode": "text",
            "answer": "yes",
        }
        code, body = refused(
            served, "POST", "/answer", body=fields, headers={"Origin": served.origin}
        )
        assert code == 409 and b"orchestrate trust" in body
    assert not (workdir / ".agent-response.json").exists()
    no_traceback(served)


def test_a_forged_kept_state_is_listed_with_a_warning_and_offers_no_form(tmp_path: Path) -> None:
    from support.cli import orchestrate
    from support.ui_support import REPO

    workdir = tmp_path / "work"
    workdir.mkdir()
    flow = f"{REPO / 'tests' / 'support' / 'store_flows.py'}:Chatter"
    echo = REPO / "tests" / "support" / "echo_agent.py"
    agent = f"subprocess:{sys.executable} {echo}"
    done = orchestrate("run", flow, "--workdir", workdir, "--agent", agent)
    assert done.returncode == 0, done.stderr
    run_id = run_of(workdir)
    untouched = tmp_path / "untouched"
    shutil.copytree(workdir, untouched, symlinks=True)
    kept = workdir / ".orchestrator" / "runs" / run_id / "state.json"
    data = json.loads(kept.read_text())
    data["phase_data"]["x_orchestrator"]["status"] = "failed"  # as if to be retried
    kept.write_text(json.dumps(data))
    with serving(workdir, untouched) as served:
        listed = served.request("GET", "/")[2].decode()
        assert run_id[:8] in listed and listed.count("signature NOT VALID") == 1
        page = served.request("GET", "/run?" + urlencode({"dir": 1, "run": run_id}))[2].decode()
        assert "badge completed" in page and "untrusted" not in page  # the signed copy
        page = served.request("GET", "/run?" + urlencode({"dir": 0, "run": run_id}))[2].decode()
        assert "class='refused untrusted'" in page
        assert "<form" not in page and "Retry the failed phase" not in page
    no_traceback(served)


def test_a_host_beyond_this_machine_needs_allow_remote(tmp_path: Path) -> None:
    from support.cli import child_env, command

    workdir, _ = paused_run(tmp_path)
    process = subprocess.Popen(
        command("ui", "--workdir", workdir, "--host", "0.0.0.0", "--port", "0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.terminate()
        out, err = process.communicate(timeout=30)
        pytest.fail(f"served on 0.0.0.0 without --allow-remote: {out}")
    assert process.returncode == 2 and not out
    assert "--allow-remote" in err and "unencrypted" in err and "Traceback" not in err
    with serving(workdir, options=("--host", "0.0.0.0", "--allow-remote")) as served:
        code, _, _ = served.request("GET", "/", headers={"Host": f"127.0.0.1:{served.port}"})
        assert code == 200
        refused(served, "GET", "/", headers={"Host": f"evil.example:{served.port}"})
    assert "unencrypted" in served.stderr
    no_traceback(served)


# -- the hostile-request suite ------------------------------------------------------------


def test_every_hostile_request_is_refused_and_puts_no_traceback(tmp_path: Path) -> None:
    """One server over one work directory with every hazard planted; each hostile
    request gets a 4xx, and the server's stderr has no traceback at the end."""
    workdir = regression_folder(tmp_path)
    run_id = run_of(workdir)
    secret = tmp_path / "users-secret.txt"
    secret.write_text("not yours")
    forge_live_state(workdir)
    run_dir = workdir / ".orchestrator" / "runs" / run_id
    os.link(secret, run_dir / "hard.txt")
    os.symlink(secret, run_dir / "linked.txt")
    os.mkfifo(run_dir / "pipe.ndjson")
    os.link(secret, workdir / "runs" / "baseline" / "r-base" / "hard.txt")
    ended = workdir / ".orchestrator" / "runs" / "ended-elsewhere"
    os.symlink(tmp_path, ended)
    a_tree_too_deep_to_walk(tmp_path / "deep")
    with serving(workdir) as served:
        token = served.token
        evidence = {"dir": 0, "run": run_id, "view": "file"}
        hostile: list[tuple[str, str, dict[str, object]]] = [
            ("GET", f"//evil.example/?token={token}", {"cookie": False}),
            ("GET", f"//evil.example/x?a=1&token={token}", {}),
            ("GET", f"/%2F%2Fevil.example/?token={token}", {}),
            ("GET", f"/%5C%5Cevil.example/?token={token}", {}),
            ("GET", "/", {"headers": {"Host": "evil.example"}}),
            ("GET", "/", {"headers": {"Host": f"evil.example:{served.port}"}}),
            ("GET", "/", {"headers": {"Host": f"localhost.evil.example:{served.port}"}}),
            ("GET", "/?" + urlencode({"token": token}), {"headers": {"Host": "evil.example"}}),
            ("GET", "/run?" + urlencode({**evidence, "path": "hard.txt"}), {}),
            ("GET", "/run?" + urlencode({**evidence, "path": "linked.txt"}), {}),
            ("GET", "/run?" + urlencode({**evidence, "path": "pipe.ndjson"}), {}),
            ("GET", "/run?" + urlencode({**evidence, "path": "../../../../users-secret.txt"}), {}),
            ("GET", "/run?" + urlencode({"dir": 0, "run": "ended-elsewhere"}), {}),
            (
                "GET",
                "/run?" + urlencode({"dir": 0, "run": "ended-elsewhere", "view": "events"}),
                {},
            ),
            ("GET", "/evals/0/.template-create-state.json", {}),
            ("GET", f"/evals/0/.orchestrator/runs/{run_id}/events.ndjson", {}),
            ("GET", "/evals/0/runs/cases.json", {}),
            ("GET", "/evals/0/runs/baseline/r-base/hard.txt", {}),
            ("GET", "/evals/0/runs/baseline/r-base/../../../../users-secret.txt", {}),
            ("GET", "/evals/0/runs/%2e%2e/%2e%2e/users-secret.txt", {}),
            ("GET", "/evals/0//etc/passwd", {}),
            ("GET", "/evals/1/runs/report.html", {}),
            ("GET", "/static/..%2fapp.py", {}),
        ]
        for method, target, options in hostile:
            _, body = refused(served, method, target, **options)
            assert b"not yours" not in body, target
        fields = {
            "dir": "0",
            "run": run_id,
            "csrf": csrf_of(served, run_id),
            "request": "x",
            "mode": "text",
            "answer": "yes",
        }
        for path in ("/answer", "/retry", "/rewind", "/wake"):
            refused(served, "POST", path, body=fields, headers={"Origin": served.origin})
        refused(
            served,
            "POST",
            "/answer",
            body=fields,
            headers={"Origin": served.origin, "Host": "evil.example"},
        )
    assert not (workdir / ".agent-response.json").exists()
    no_traceback(served)
