"""Replay refuses a workflow whose code changed under a paused instance.

``run`` records the absolute path of the workflow file, so the realistic way for code to
change between a pause and a resume is for someone to edit that very file. Each test
copies tests/fixtures/bad_input/wf.py into its temporary directory, starts ``tiny`` from
the copy with a real ``python -m orchestrator run`` (exit 42), answers the request, edits
the copy, and resumes. It proves that:

- a changed prompt shows the recorded and the current text (a short unified diff, where
  they first differ), keeps the answer given, and goes on with it once the old text is
  back and the run retried (a retry with the new text asks it anew);
- a renamed step, an ask replaced by a step, and a phase that ends
  before its recorded asks (one ask fewer) each fail the resume with exit 1 and a one-line
  non-determinism error that names the phase, the position and what changed;
- the failure is recorded: the state file stays, with status ``failed``, and a second
  ``resume`` repeats the same failure without changing a byte of it;
- no step's side effect runs again, and the step that replaced an ask never runs;
- the positive control: the same code (the file rewritten with identical text) resumes to
  the end, so the failures above come from the edits and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support import bad_input_support as bad_input
from support.cli import orchestrate

ANSWER = "Owls hunt at night and see well in the dark."

ASK_LINE = 'return ctx.ask("writer", PROMPT.format(topic=topic))'
STEP_LINE = 'ctx.step("outline", _outline, ctx.output_path, topic)'


pytestmark = pytest.mark.slow


def paused_copy(tmp_path: Path, *, rename_step_to: str | None = None) -> bad_input.Instance:
    """Start ``tiny`` from a private copy of the workflow file and answer its request.

    ``rename_step_to`` gives phase 1's step another name in the copy before the run.
    """
    workflow_file = tmp_path / "flows" / "wf.py"
    workflow_file.parent.mkdir()
    source = bad_input.WORKFLOW_FILE.read_text(encoding="utf-8")
    if rename_step_to is not None:
        source = source.replace('ctx.step("outline",', f'ctx.step("{rename_step_to}",')
    workflow_file.write_text(source, encoding="utf-8")
    instance = bad_input.start(tmp_path, workflow_file=workflow_file)
    assert instance.engine_record()["workflow"] == f"{workflow_file}:Tiny"
    responded = instance.respond(ANSWER)
    assert responded.returncode == 0, bad_input.describe(responded)
    assert instance.steps() == ["outline"]
    return instance


def edit(instance: bad_input.Instance, old: str, new: str) -> None:
    source = instance.workflow_file.read_text(encoding="utf-8")
    assert source.count(old) == 1, f"{old!r} should occur once in the workflow"
    instance.workflow_file.write_text(source.replace(old, new), encoding="utf-8")


def assert_fails_with(instance: bad_input.Instance, *fragments: str) -> str:
    """Resume fails (exit 1) naming ``fragments``; the failure is kept and repeatable."""
    result = instance.resume()
    assert result.returncode == 1, bad_input.describe(result)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    message = lines[0]
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"

    record = instance.engine_record()
    assert record["status"] == "failed"
    assert instance.state()["checkpoint_name"] == "run_failed"
    assert not instance.request_path.exists(), "a failed run asks nothing"
    failed_state = instance.state_bytes()

    again = instance.resume()
    assert again.returncode == 1, bad_input.describe(again)
    assert "already failed" in again.stderr
    for fragment in fragments:
        assert fragment in again.stderr, f"{fragment!r} not repeated in {again.stderr!r}"
    assert instance.state_bytes() == failed_state, "a repeated failure must not change the state"
    assert instance.steps() == ["outline"], "replay must not run a step again"
    assert not (instance.output / "answer.txt").exists()
    return message


RECORDED_LINE = "no headings, no lists. Topic: owls"
EDITED_LINE = "no headings, no lists, no adjectives. Topic: owls"


def edit_the_prompt(instance: bad_input.Instance) -> None:
    edit(instance, "no headings, no lists", "no headings, no lists, no adjectives")


def assert_shows_both_texts(stderr: str) -> list[str]:
    """The failure of an edited prompt: a first line naming the phase, the position and
    where the texts first differ; the recorded and the current line as a unified diff;
    what to do on the last line. No digests, no traceback, a bounded number of lines."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    first = lines[0]
    for fragment in (
        "phase 'draft' (phase 1)",
        "position 1",
        "the recorded run made ask of writer",
        "the prompt changed (request 0)",
    ):
        assert fragment in first, f"{fragment!r} not in {first!r}"
    prompt = bad_input.WORKFLOW_FILE.read_text(encoding="utf-8")
    recorded = "You are the writer" + prompt.split('"You are the writer', 1)[1].split("{topic}")[0]
    recorded = recorded.replace('"\n    "', "")  # the two literals of PROMPT, joined
    column = recorded.index("no lists") + len("no lists") + 1
    assert f"first difference at line 1, column {column} (offset {column - 1})" in first
    assert "recorded '. Topic: owls', now ', no adjectives. Topic: '" in first
    assert "--- recorded prompt" in lines and "+++ current prompt" in lines
    (removed,) = [line for line in lines if line.startswith("-") and not line.startswith("---")]
    (added,) = [line for line in lines if line.startswith("+") and not line.startswith("+++")]
    assert removed.endswith(RECORDED_LINE), removed
    assert added.endswith(EDITED_LINE), added
    assert "put the old text back and 'orchestrate retry' goes on" in lines[-1]
    assert "sha256" not in stderr
    assert len(lines) < 12, stderr
    return lines


def test_a_changed_prompt_fails_the_resume_showing_both_texts(tmp_path: Path) -> None:
    instance = paused_copy(tmp_path)
    edit_the_prompt(instance)
    result = instance.resume()
    assert result.returncode == 1, bad_input.describe(result)
    assert_shows_both_texts(result.stderr)

    record = instance.engine_record()
    assert record["status"] == "failed"
    assert not instance.request_path.exists(), "a failed run asks nothing"
    # The answer given to the recorded prompt is kept in the state.
    (kept,) = instance.state()["agent_requests"]
    assert kept["status"] == "completed"
    assert kept["x_response"]["response"] == ANSWER
    failed_state = instance.state_bytes()

    again = instance.resume()
    assert again.returncode == 1, bad_input.describe(again)
    assert "already failed" in again.stderr
    assert_shows_both_texts(again.stderr)
    assert instance.state_bytes() == failed_state, "a repeated failure must not change the state"
    assert instance.steps() == ["outline"], "replay must not run a step again"


def test_the_old_prompt_put_back_goes_on_with_the_answer_given(tmp_path: Path) -> None:
    """The edit fails the resume; with the old text back, retry replays the recorded
    answer: no new request, no step run again, the run completes with that answer."""
    instance = paused_copy(tmp_path)
    (answered,) = instance.state()["agent_requests"]
    edit_the_prompt(instance)
    assert instance.resume().returncode == 1
    edit(instance, "no headings, no lists, no adjectives", "no headings, no lists")
    retried = orchestrate("retry", "--workdir", instance.workdir)
    assert retried.returncode == 0, bad_input.describe(retried)
    assert instance.answer() == ANSWER + "\n"
    assert instance.steps() == ["outline", "save"]
    (history,) = instance.history()
    assert [r["request_id"] for r in history["agent_requests"]] == [answered["request_id"]]
    assert history["phase_data"]["draft"] == ANSWER


def test_a_changed_prompt_kept_is_asked_again_by_retry(tmp_path: Path) -> None:
    """The other way on: retry with the new text asks it as a new request."""
    instance = paused_copy(tmp_path)
    (answered,) = instance.state()["agent_requests"]
    edit_the_prompt(instance)
    assert instance.resume().returncode == 1
    retried = orchestrate("retry", "--workdir", instance.workdir)
    assert retried.returncode == 42, bad_input.describe(retried)
    request = instance.request()
    assert request["request_id"] != answered["request_id"]
    assert EDITED_LINE in request["prompt"]


def test_a_renamed_step_fails_the_resume(tmp_path: Path) -> None:
    """Fixed in d769c9a: before, the comparison crashed with 'ValueError: not enough values
    to unpack' (step names were split like 'agent prompt-hash' pairs)."""
    instance = paused_copy(tmp_path)
    edit(instance, 'ctx.step("outline",', 'ctx.step("sketch",')
    message = assert_fails_with(
        instance,
        "phase 'draft' (phase 1)",
        "position 0",
        "step 'outline' became 'sketch'",
    )
    assert "ValueError" not in message


def test_a_renamed_step_with_spaces_is_named_as_a_step(tmp_path: Path) -> None:
    """Step names with a space must not be read as 'agent prompt-hash' pairs."""
    instance = paused_copy(tmp_path, rename_step_to="make outline")
    edit(instance, 'ctx.step("make outline",', 'ctx.step("draw outline",')
    message = assert_fails_with(instance, "position 0", "step 'make outline' became 'draw outline'")
    assert "agent" not in message.split("position 0", 1)[1].split(";")[0]


def test_an_ask_replaced_by_a_step_fails_the_resume(tmp_path: Path) -> None:
    instance = paused_copy(tmp_path)
    edit(instance, ASK_LINE, 'return ctx.step("compose", _outline, ctx.output_path, topic)')
    assert_fails_with(
        instance,
        "phase 'draft' (phase 1)",
        "position 1",
        "the recorded run made ask of writer",
        "this run makes step 'compose'",
        "the call changed",
    )
    # assert_fails_with checked steps.log: the replacing step's function never ran.


def test_one_ask_fewer_on_replay_fails_the_resume(tmp_path: Path) -> None:
    instance = paused_copy(tmp_path)
    edit(instance, ASK_LINE, 'return "no agent needed after all"')
    assert_fails_with(
        instance,
        "phase 'draft' (phase 1)",
        "finished at position 1",
        "the recorded run went on to ask of writer",
    )


def test_the_failure_is_detected_once_answered(tmp_path: Path) -> None:
    """Before the host answers, a resume only re-publishes the recorded request (the
    protocol's "no response yet: exit 42 again, changing nothing"); the edit is caught by
    the first resume that has an answer to replay."""
    workflow_file = tmp_path / "flows" / "wf.py"
    workflow_file.parent.mkdir()
    workflow_file.write_bytes(bad_input.WORKFLOW_FILE.read_bytes())
    instance = bad_input.start(tmp_path, workflow_file=workflow_file)
    request, state = instance.request_path.read_bytes(), instance.state_bytes()
    edit(instance, "no headings, no lists", "no headings, no lists, no adjectives")
    waiting = instance.resume()
    assert waiting.returncode == 42, bad_input.describe(waiting)
    assert instance.request_path.read_bytes() == request
    assert instance.state_bytes() == state
    assert instance.respond(ANSWER).returncode == 0
    failed = instance.resume()
    assert failed.returncode == 1, bad_input.describe(failed)
    assert_shows_both_texts(failed.stderr)


def test_the_same_code_resumes_to_the_end(tmp_path: Path) -> None:
    """Positive control: rewriting the file with the same text (new mtime) changes nothing."""
    instance = paused_copy(tmp_path)
    source = instance.workflow_file.read_text(encoding="utf-8")
    instance.workflow_file.write_text(source, encoding="utf-8")
    result = instance.resume()
    assert result.returncode == 0, bad_input.describe(result)
    assert instance.answer() == ANSWER + "\n"
    assert instance.steps() == ["outline", "save"]
    assert not instance.state_path.exists()
