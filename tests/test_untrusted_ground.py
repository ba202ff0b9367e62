"""The work directory is untrusted ground: what a host, an agent or the machine leaves
there is refused in one line that names the file and what to do, and nothing is lost.

Every test drives real ``python -m orchestrator`` processes against the ``tiny`` workflow
(tests/fixtures/bad_input/wf.py) in a temporary work directory, with real files, FIFOs and
kernel limits:

- a response holding a lone UTF-16 surrogate escape (``"\\ud800"``) is refused with its
  place, left where it is, and the request stays answerable (the engine's own records
  still read back what a workflow made, lone surrogates included);
"""

from __future__ import annotations

from pathlib import Path

import pytest

try:  # tests/ may or may not become a package; work either way
    from . import bad_input_support as support
except ImportError:
    import bad_input_support as support  # type: ignore[no-redef]

Instance = support.Instance
assert_one_line_error = support.assert_one_line_error
describe = support.describe
response_bytes = support.response_bytes
start = support.start

ANSWER = "Owls hunt at night and see well in the dark."


def answered_to_the_end(instance: Instance, text: str = ANSWER) -> None:
    """A correct answer now resumes the run to its end, and no step ran twice."""
    instance.answer_and_resume(text, expect=0)
    assert instance.answer() == text + "\n"
    assert instance.steps() == ["outline", "save"]
    (history,) = instance.history()
    assert [r["x_response"]["response"] for r in history["agent_requests"]] == [text]


def refused_twice(instance: Instance, bad: Path, *fragments: str) -> str:
    """Resume with ``bad`` in place: exit 1, one line naming it, nothing changed, twice."""
    state_before = instance.state_bytes()
    request_before = instance.request_path.read_bytes()
    bad_before = bad.read_bytes()
    line = ""
    for _ in range(2):
        result = instance.resume()
        assert result.returncode == 1, describe(result)
        line = assert_one_line_error(result.stderr, str(bad), *fragments)
        assert instance.state_bytes() == state_before
        assert instance.request_path.read_bytes() == request_before
        assert bad.read_bytes() == bad_before, "the refused file must be left as it is"
    return line


# -- 1. lone surrogates ---------------------------------------------------------------------


@pytest.mark.parametrize("escape", ["\\ud800", "\\udc00", "\\uD83DA", "\\ud83d\\u0041"])
@pytest.mark.parametrize("where", ["single", "parallel"])
def test_a_response_with_a_lone_surrogate_is_refused_and_left_in_place(
    tmp_path: Path, escape: str, where: str
) -> None:
    instance = start(tmp_path)
    rid = instance.request()["request_id"]
    good = response_bytes(rid, "Owls PLACEHOLDER at night.")
    bad_bytes = good.replace(b"PLACEHOLDER", escape.encode("ascii"))
    bad = instance.response_path
    if where == "parallel":
        bad = instance.workdir / ".agent-responses" / f"{rid}.json"
        bad.parent.mkdir()
    bad.write_bytes(bad_bytes)
    line_number = bad_bytes[: bad_bytes.index(b"\\u")].count(b"\n") + 1
    refused_twice(
        instance,
        bad,
        escape[:6],
        "lone UTF-16 surrogate",
        f"at line {line_number}, column",
        "$.response",
        "the request is still pending",
    )
    status = support.orchestrate("status", "--workdir", instance.workdir)
    assert status.returncode == 0, describe(status)
    assert f"pending    {rid}" in status.stdout
    bad.unlink()
    answered_to_the_end(instance)


def test_a_response_with_a_surrogate_pair_escape_is_accepted(tmp_path: Path) -> None:
    instance = start(tmp_path)
    rid = instance.request()["request_id"]
    good = response_bytes(rid, "Owls PLACEHOLDER at night.")
    instance.response_path.write_bytes(good.replace(b"PLACEHOLDER", b"\\ud83e\\udd89"))
    result = instance.resume()
    assert result.returncode == 0, describe(result)
    assert instance.answer() == "Owls \U0001f989 at night.\n"


def test_respond_refuses_text_that_is_not_utf8(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 reach ``sys.argv`` as lone surrogates: refused at once,
    rather than written into a response that resume would refuse."""
    instance = start(tmp_path)
    state_before = instance.state_bytes()
    result = support.orchestrate("respond", "--workdir", instance.workdir, "--text", "a\udcffb")
    assert result.returncode == 2, describe(result)
    assert_one_line_error(result.stderr, "--text is not UTF-8 text", "--file")
    assert not instance.response_path.exists()
    assert instance.state_bytes() == state_before
    answered_to_the_end(instance)


def test_values_a_workflow_made_with_lone_surrogates_still_read_back(tmp_path: Path) -> None:
    """The engine's own records keep what the workflow gave them, such as a name read with
    ``surrogateescape`` (here an input from bytes that are not UTF-8): the state and its
    history hold it as an escape, and every command reads them."""
    instance = start(tmp_path, note="caf\udce9")
    assert b"caf\\udce9" in instance.state_bytes()
    for command in ("status", "history", "events"):
        result = support.orchestrate(command, "--workdir", instance.workdir)
        assert result.returncode == 0, (command, describe(result))
    answered_to_the_end(instance)
    (history,) = instance.history()
    assert history["phase_data"]["x_orchestrator"]["inputs"]["note"] == "caf\udce9"
    for command in ("status", "history", "output"):
        result = support.orchestrate(command, "--workdir", instance.workdir)
        assert result.returncode == 0, (command, describe(result))
