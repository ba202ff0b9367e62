"""``orchestrate ui`` as a person starts it: a real server process on loopback, the link
it prints, and plain HTTP against it."""

from __future__ import annotations

import http.client
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from support.cli import command
from support.process_support import example_answer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "template_create"


class Served:
    def __init__(self, url: str) -> None:
        self.url = url
        #: what the server wrote on stderr, once it has stopped (after ``serving``)
        self.stderr = ""
        parts = urlsplit(url)
        self.host, self.port = str(parts.hostname), int(parts.port or 80)
        self.token = parts.query.removeprefix("token=")
        self.cookie = f"orchestrator_ui={self.token}"

    def request(
        self,
        method: str,
        target: str,
        *,
        body: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        cookie: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        sent = dict(headers or {})
        if cookie:
            sent["Cookie"] = self.cookie
        data = None
        if body is not None:
            data = urlencode(body).encode()
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, target, body=data, headers=sent)
        reply = connection.getresponse()
        result = reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        connection.close()
        return result

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextmanager
def serving(
    *workdirs: Path, store: str | None = None, options: tuple[str, ...] = ()
) -> Iterator[Served]:
    """A server over ``workdirs`` (and ``store``); its stderr is in ``Served.stderr`` once
    the block has ended and the server has stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
    env["ORCHESTRATOR_KEY_FILE"] = os.environ["ORCHESTRATOR_KEY_FILE"]
    argv = command("ui", *options)
    for workdir in workdirs:
        argv += ["--workdir", str(workdir)]
    if store is not None:
        argv += ["--store", store]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    served = None
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://"), process.stderr.read() if process.stderr else ""
        served = Served(url)
        yield served
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
        if served is not None:
            served.stderr = stderr


def paused_template_create(workdir: Path) -> None:
    """The template-create example, started and paused for its first answer."""
    from support.cli import orchestrate

    workdir.mkdir(parents=True, exist_ok=True)
    started = orchestrate(
        "run",
        f"{EXAMPLE / 'workflow.py'}:TemplateCreate",
        "--workdir",
        workdir,
        "--output",
        workdir / "template",
        "--input",
        f"project_path={EXAMPLE / 'sample_project'}",
        "--input",
        "template_name=task-tracker",
    )
    assert started.returncode == 42, started.stderr


fake_answer = example_answer
