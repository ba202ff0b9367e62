"""The wire names of step evidence (status values, event types, file names), apart from the
models in ``steps`` so that a writer of events needs no more than these strings."""

from __future__ import annotations

STEPS_SCHEMA_VERSION = "1.0"
STEPS_SUPPORTED_MAJOR = 1
RESULTS_FILE = "results.json"
EVENTS_FILE = "events.ndjson"
EXTENSION_PREFIX = "x_"

STATUS_PASS = "pass"
STATUS_FAIL = "fail"
STATUS_ERROR = "error"
STATUS_ABSTAIN = "abstain"

EVENT_AGENT_START = "agent.start"
EVENT_AGENT_END = "agent.end"
EVENT_SKILL_START = "skill.start"
EVENT_SKILL_END = "skill.end"
EVENT_TOOL_CALL = "tool.call"
EVENT_TOOL_RESULT = "tool.result"
EVENT_ARTIFACT_WRITTEN = "artifact.written"
EVENT_DECISION = "decision"
EVENT_ERROR = "error"
#: The format's initial event types; steps add their own (``review.file_analyzed``).
EVENT_TYPES = (
    EVENT_AGENT_START,
    EVENT_AGENT_END,
    EVENT_SKILL_START,
    EVENT_SKILL_END,
    EVENT_TOOL_CALL,
    EVENT_TOOL_RESULT,
    EVENT_ARTIFACT_WRITTEN,
    EVENT_DECISION,
    EVENT_ERROR,
)

# The event name pattern is the schema's own, in the dialect Python and ECMA 262 share;
# ``(?![\s\S])`` is "end of input" in both: ``$`` would also match before a final "\n".
EVENT_NAME_PATTERN = r"^[a-z0-9_]+(\.[a-z0-9_]+)*(?![\s\S])"
