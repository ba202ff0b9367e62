"""An offline stand-in for the two agents of the template-create example.

Reads an ``.agent-request.json`` document on stdin and prints a deterministic answer
derived from the prompt alone, the way a host's handler would print a model's reply.
Used by ``orchestrate drive --handler "python examples/template_create/fake_agent.py"``.
"""

from __future__ import annotations

import json
import re
import sys


def analysis(prompt: str) -> dict[str, object]:
    languages = json.loads(re.search(r"Languages \(files\): (\{.*\})", prompt).group(1))  # type: ignore[union-attr]
    frameworks = re.search(r"Frameworks from manifests: (.*)", prompt).group(1)  # type: ignore[union-attr]
    files = re.findall(r"^- (.+)$", prompt, flags=re.MULTILINE)
    layers = sorted({f.split("/")[2] for f in files if f.startswith("src/") and f.count("/") >= 3})
    patterns = ["Repository"] if any("repository" in f for f in files) else []
    if any("schemas" in f for f in files):
        patterns.append("DTO")
    return {
        "technology_stack": {
            "primary_language": next(iter(languages), "unknown"),
            "frameworks": [f for f in frameworks.split(", ") if f],
            "confidence": 0.95,
        },
        "architecture_pattern": "Layered" if layers else "Flat",
        "layers": layers,
        "patterns": patterns,
        "overall_confidence": 0.92,
    }


def agent(prompt: str, enhance: bool) -> dict[str, str]:
    name = re.search(r"agent '([^']+)'", prompt).group(1)  # type: ignore[union-attr]
    if enhance:
        body = re.search(r"Current body:\n\n(.*)\n\nAnswer", prompt, flags=re.DOTALL).group(1)  # type: ignore[union-attr]
        patterns = re.search(r"the patterns (.*?)\. Current", prompt).group(1)  # type: ignore[union-attr]
        body += f"\n\n## Patterns\n\nApply: {patterns or 'none found'}."
    else:
        body = f"## Role\n\nYou are {name}. Keep changes small and tested."
    return {"name": name, "description": f"Specialist agent {name}", "body": body}


def main() -> int:
    request = json.load(sys.stdin)
    prompt = request["prompt"]
    if request["agent_name"] == "architectural-reviewer":
        answer: object = analysis(prompt)
    elif prompt.startswith("# Agent Enhancement"):
        answer = agent(prompt, enhance=True)
    else:
        answer = agent(prompt, enhance=False)
    # A whole response document, so the confidence reaches the engine's metadata.
    document = {
        "request_id": request["request_id"],
        "version": "1.0",
        "status": "success",
        "response": json.dumps(answer, sort_keys=True),
        "created_at": "2025-11-18T10:31:45Z",
        "duration_seconds": 0.0,
        "metadata": {
            "model": "offline-fake-agent",
            "tokens_used": len(prompt) // 4,
            "confidence": 0.92,
        },
    }
    print(json.dumps(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
