"""The template-create example, driven to the end by real ``orchestrate drive`` processes,
leaves a run directory whose every ``results.json`` and ``events.ndjson`` line validates
against the shipped schemas, and whose events tell the whole story in order with no
duplicates, also when the run was killed (SIGKILL) while it wrote its evidence and was
resumed.

``tests/engine/test_crash_safety.py`` makes the same check after a kill at every crash point of
the run; this file states the story itself and kills at a spread of the evidence writes.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from support.cli import orchestrate
from support.evidence_support import EXAMPLE_HANDLER as HANDLER
from support.evidence_support import check_run_evidence, example_args, run_dir_of, story

CRASH_KEYS = ("ORCHESTRATOR_CRASH_AT", "ORCHESTRATOR_CRASH_LOG")

# The example's story, phase by phase (agent answers come in the order the host wrote
# them, so each phase's agent.end lines are counted, not ordered).
STORY = [
    "run.start",
    "skill.start codebase_analysis", "tool.call scan_project", "tool.result scan_project",
    "agent.start architectural-reviewer", "run.pause", "agent.end architectural-reviewer",
    "skill.end codebase_analysis",
    "skill.start manifest_generation", "tool.call write_manifest", "tool.result write_manifest",
    "skill.end manifest_generation",
    "skill.start settings_generation", "tool.call write_settings", "tool.result write_settings",
    "skill.end settings_generation",
    "skill.start template_files", "tool.call copy_templates", "tool.result copy_templates",
    *["template.file_written"] * 6, "skill.end template_files",
    "skill.start agent_recommendation", "skill.end agent_recommendation",
    "skill.start agent_creation", *["agent.start agent-content-enhancer"] * 4, "run.pause",
    *["agent.end agent-content-enhancer"] * 4, "skill.end agent_creation",
    "skill.start agent_enhancement", *["agent.start agent-content-enhancer"] * 4, "run.pause",
    *["agent.end agent-content-enhancer"] * 4,
    "tool.call write_agents", "tool.result write_agents", "skill.end agent_enhancement",
    "skill.start claude_md_generation", "tool.call write_claude_md",
    "tool.result write_claude_md", "skill.end claude_md_generation",
    "skill.start template_validation", "tool.call find_missing", "tool.result find_missing",
    "artifact.written template_validation",
    "skill.end template_validation",
    "run.end",
]  # fmt: skip


def drive(workdir: Path, *, crash_at: int | str | None = None, log: Path | None = None) -> int:
    workdir.mkdir(exist_ok=True)
    env = {}
    if crash_at is not None:
        env = {"ORCHESTRATOR_CRASH_AT": str(crash_at), "ORCHESTRATOR_CRASH_LOG": str(log)}
    args = [*example_args(workdir, template_name="task-tracker"), "--handler", HANDLER]
    return orchestrate("drive", *args, env=env).returncode


def told(events: list[dict]) -> list[str]:
    out = []
    for event in events:
        data = event["data"]
        about = data.get("agent") or data.get("tool") or data.get("skill")
        plain = event["event"].startswith("run.") or about is None
        out.append(event["event"] if plain else f"{event['event']} {about}")
    return out


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example run uninterrupted, in count mode (``points.log`` beside its workdir)."""
    base = tmp_path_factory.mktemp("example-evidence")
    assert drive(base / "work", crash_at="count", log=base / "points.log") == 0
    return base / "work"


@pytest.fixture(scope="module")
def baseline(example_run: Path) -> tuple[list[dict], list[str]]:
    """The example run's events and its crash points."""
    log = example_run.parent / "points.log"
    labels = [line.split(" ", 1)[1] for line in log.read_text().splitlines()]
    return check_run_evidence(run_dir_of(example_run)), labels


@pytest.mark.slow
def test_the_example_tells_its_whole_story_in_valid_evidence(
    baseline: tuple[list[dict], list[str]],
) -> None:
    events, _ = baseline
    assert told(events) == STORY
    # Nine phase results and nine agent requests, each with its prompt and answer.
    ends = [e["data"] for e in events if e["event"] == "agent.end"]
    assert len(ends) == 9 and {e["status"] for e in ends} == {"pass"}
    assert {e["confidence"] for e in ends} == {0.92}
    phases = [e["data"] for e in events if e["event"] == "skill.end"]
    assert [p["phase"] for p in phases] == list(range(1, 10))
    # The author's own events and artifact.
    written = [e["data"]["path"] for e in events if e["event"] == "template.file_written"]
    assert len(written) == 6 and all(p.startswith("templates/") for p in written)
    artifact = next(e["data"] for e in events if e["event"] == "artifact.written")
    assert artifact["path"] == "validation.md" and artifact["media_type"] == "text/markdown"


@pytest.mark.slow
def test_kills_while_writing_evidence_leave_the_same_story(
    baseline: tuple[list[dict], list[str]], tmp_path: Path
) -> None:
    events, labels = baseline
    # Points inside the evidence writes: files of output directories and log appends.
    evidence = [
        number
        for number, label in enumerate(labels, start=1)
        if label.split(" ", 1)[1] in ("events.ndjson", "results.json", "prompt.md", "response.json")
    ]
    assert len(evidence) > 40
    chosen = evidence[:: max(1, len(evidence) // 8)]
    for point in chosen:
        workdir = tmp_path / f"kill-{point}"
        log = tmp_path / f"kill-{point}.log"
        assert drive(workdir, crash_at=point, log=log) == -signal.SIGKILL, labels[point - 1]
        assert drive(workdir) == 0
        resumed = check_run_evidence(run_dir_of(workdir))
        assert story(resumed) == story(events), (
            f"the story differs after a kill at {labels[point - 1]}"
        )


def test_history_shows_the_example_as_a_timeline(example_run: Path) -> None:
    """``orchestrate history``: a header, then the phases and asks in time order, each
    with its offset from the start; the asks with how they were answered."""
    shown = orchestrate("history", "--workdir", example_run)
    assert shown.returncode == 0, shown.stderr
    header, *lines = shown.stdout.splitlines()
    assert header.startswith("template-create  run ") and "  completed  " in header
    phases = [line.split()[2] for line in lines if line.split()[1] == "phase"]
    assert phases == [str(n) for n in range(1, 10)]
    asks = [line for line in lines if line.split()[1] == "ask"]
    assert len(asks) == 9
    assert all(
        "completed: answered after" in line and "offline-fake-agent" in line for line in asks
    )
    offsets = [line.split()[0] for line in lines if line.startswith("+")]
    assert offsets == sorted(offsets) and len(offsets) == 18
