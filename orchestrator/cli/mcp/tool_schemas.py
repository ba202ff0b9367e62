"""The tools ``orchestrate mcp`` offers: each one's name (the contract), what it does and
the JSON Schema of its input. Plain data, read by :mod:`.server` and by the docs."""

from __future__ import annotations

from typing import Any

_RUN_ID = {"type": "string", "description": "the run's id, as start_run or status gives it"}
_TASK_ID = {"type": "string", "description": "the task's id on the run's board"}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_METADATA = _object(
    {
        "model": {"type": "string"},
        "tokens_used": {"type": "integer", "minimum": 0},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    }
)

RUN_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "list_workflows": (
        "The workflows this server can start, with the inputs each reads.",
        _object({}),
    ),
    "start_run": (
        "Start a workflow; returns the run id and where it stands (paused: the requests "
        "it waits for).",
        _object(
            {
                "workflow": {"type": "string", "description": "as list_workflows names it"},
                "inputs": {"type": "object", "description": "input names and their values"},
                "output": {"type": "string", "description": "the output path, if it has one"},
            },
            ("workflow",),
        ),
    ),
    "list_pending": (
        "Every request waiting for an answer (of one run, or of all): its prompt, the "
        "answer's JSON Schema (x_answer_schema), deadline, attempt and x_previous_error.",
        _object({"run_id": _RUN_ID}),
    ),
    "respond": (
        "Answer a pending request: answer (text or JSON), error (type and message) or a "
        "whole response document; through the answer gate (a refusal names the field; "
        "nothing is written). resume=true resumes once every request is answered.",
        _object(
            {
                "run_id": _RUN_ID,
                "request_id": {"type": "string"},
                "answer": {"description": "the answer: text, or JSON of the answer's schema"},
                "error": _object(
                    {"type": {"type": "string"}, "message": {"type": "string"}}, ("type",)
                ),
                "document": {"type": "object", "description": "a whole response document"},
                "metadata": _METADATA,
                "resume": {"type": "boolean"},
            },
            ("run_id",),
        ),
    ),
    "signal": (
        "Send a signal to a run, for its ctx.wait_for_signal(name) or ctx.signals(name): "
        "kept durably and in order, each taken once; through the answer gate when the run "
        "waits for it with a payload schema (a refusal names the field; nothing is kept). "
        "signal_id makes a repeated send keep it once; resume=true resumes the run after.",
        _object(
            {
                "run_id": _RUN_ID,
                "name": {"type": "string", "description": "the signal's name"},
                "payload": {"description": "the signal's data, any JSON value (default null)"},
                "signal_id": {"type": "string", "description": "the sender's id for it"},
                "resume": {"type": "boolean"},
            },
            ("run_id", "name"),
        ),
    ),
    "resume": (
        "Go on with a run whose requests are answered; returns where it stands.",
        _object({"run_id": _RUN_ID}, ("run_id",)),
    ),
    "status": (
        "One run's status (its phase, what it waits for, or how it ended), or every run.",
        _object({"run_id": _RUN_ID}),
    ),
    "output": (
        "A run's phase outputs (or one phase's).",
        _object({"run_id": _RUN_ID, "phase": {"type": "string"}}, ("run_id",)),
    ),
    "events": (
        "A run's events after x_seq after_seq.",
        _object({"run_id": _RUN_ID, "after_seq": {"type": "integer", "minimum": 0}}, ("run_id",)),
    ),
    "cancel": ("Cancel a run; its history is kept.", _object({"run_id": _RUN_ID}, ("run_id",))),
    "retry": (
        "Retry a failed run, reusing every recorded answer that still matches.",
        _object({"run_id": _RUN_ID}, ("run_id",)),
    ),
    "rewind": (
        "Rewind a run to a phase (its name or number); resume then runs it again.",
        _object(
            {"run_id": _RUN_ID, "to": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            ("run_id", "to"),
        ),
    ),
}

BOARD_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "task_packet": (
        "The assignment packet a subagent works from (its lock scope, criteria, worklog).",
        _object(
            {"task_id": _TASK_ID, "board": {"type": "string"}, "attempt": {"type": "integer"}},
            ("task_id",),
        ),
    ),
    "heartbeat": (
        "Say the subagent on the task is alive.",
        _object({"task_id": _TASK_ID, "board": {"type": "string"}}, ("task_id",)),
    ),
    "worklog_append": (
        "Append an entry to the task's worklog (actor, action, decision, result, "
        "next_step, files).",
        _object(
            {"task_id": _TASK_ID, "board": {"type": "string"}, "entry": {"type": "object"}},
            ("task_id", "entry"),
        ),
    ),
    "submit": (
        "Hand in the task's result through the board's gateway; the verdict is the "
        "result, a refusal a tool error with the gateway's code.",
        _object(
            {"task_id": _TASK_ID, "board": {"type": "string"}, "result": {"type": "object"}},
            ("task_id", "result"),
        ),
    ),
}
