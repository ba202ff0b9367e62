"""template-create: the workflow the agent bridge files were first written for, made real.

Scans a project directory, asks ``architectural-reviewer`` for an analysis, writes a
manifest and settings, asks ``agent-content-enhancer`` for several agents at once and
then to enhance them, and writes the template into the output path.

Run it offline, end to end::

    orchestrate drive examples/template_create/workflow.py:TemplateCreate \
        --workdir /tmp/tc --output /tmp/tc/template \
        --input project_path=examples/template_create/sample_project \
        --input template_name=task-tracker \
        --handler "python examples/template_create/fake_agent.py"
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

from orchestrator import Ask, PhaseResult, Workflow, phase

LANGUAGES = {
    ".py": "Python",
    ".ts": "TypeScript",
    ".tsx": "TypeScript",
    ".js": "JavaScript",
    ".cs": "C#",
    ".go": "Go",
    ".rs": "Rust",
    ".java": "Java",
    ".rb": "Ruby",
}
FRAMEWORK_MARKERS = {
    "fastapi": "FastAPI",
    "django": "Django",
    "flask": "Flask",
    "sqlalchemy": "SQLAlchemy",
    "pydantic": "Pydantic",
    "pytest": "pytest",
    "react": "React",
    "vite": "Vite",
    "express": "Express",
}
SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", "dist", "build"}


@attrs.frozen(kw_only=True)
class TechnologyStack:
    primary_language: str
    frameworks: list[str]
    confidence: float


@attrs.frozen(kw_only=True)
class Analysis:
    """What ``architectural-reviewer`` answers (its JSON, structured)."""

    technology_stack: TechnologyStack
    architecture_pattern: str
    layers: list[str]
    patterns: list[str]
    overall_confidence: float


@attrs.frozen(kw_only=True)
class AgentDefinition:
    """What ``agent-content-enhancer`` answers for one agent."""

    name: str
    description: str
    body: str


def scan_project(root: Path) -> dict[str, Any]:
    """Languages, frameworks and file counts of a real directory tree."""
    counts: Counter[str] = Counter()
    files: list[str] = []
    manifests: dict[str, str] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(directory) / name
            relative = path.relative_to(root).as_posix()
            files.append(relative)
            language = LANGUAGES.get(path.suffix)
            if language:
                counts[language] += 1
            if name in ("pyproject.toml", "package.json", "requirements.txt"):
                manifests[relative] = path.read_text(encoding="utf-8", errors="replace")
    text = "\n".join(manifests.values()).lower()
    frameworks = sorted({label for marker, label in FRAMEWORK_MARKERS.items() if marker in text})
    return {
        "file_count": len(files),
        "languages": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "frameworks": frameworks,
        "files": files,
        "has_tests": any(f.split("/")[-1].startswith("test_") for f in files),
    }


def find_missing(root: str, expected: list[str]) -> list[str]:
    """The files of ``expected`` that are not under ``root``."""
    return [name for name in expected if not (Path(root) / name).is_file()]


def write_text(path: Path, text: str) -> str:
    """Write a file whole, by rename, so that a crash leaves the old or the new one; and
    durably (the data, the rename, each new directory), so that once the step returns and
    its result is recorded, a power cut cannot take the file back."""
    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    for directory in [path.parent, *(d.parent for d in reversed(made))]:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path.as_posix()


class TemplateCreate(Workflow):
    """Create a reusable project template from an existing codebase."""

    name = "template-create"
    purpose = "template creation"
    agents = ("architectural-reviewer", "agent-content-enhancer")

    def _project(self) -> Path:
        return Path(self.inputs["project_path"]).resolve()

    @phase(1, asks_agents=True, fallback="heuristic_analysis")
    def codebase_analysis(self, ctx: Any) -> PhaseResult:
        scan = ctx.step("scan_project", scan_project, self._project())
        prompt = (
            "# Codebase Analysis Request\n\n"
            "You are analyzing a codebase to build a reusable project template. Identify the "
            "primary language, frameworks, architecture pattern, layers and notable patterns. "
            "Answer with JSON: technology_stack {primary_language, frameworks, confidence}, "
            "architecture_pattern, layers, patterns, overall_confidence.\n\n"
            f"Languages (files): {json.dumps(scan['languages'])}\n"
            f"Frameworks from manifests: {', '.join(scan['frameworks'])}\n"
            f"Files ({scan['file_count']}):\n" + "\n".join(f"- {f}" for f in scan["files"])
        )
        analysis = ctx.ask(
            "architectural-reviewer", prompt, output_type=Analysis, min_confidence=0.5
        )
        output = {"scan": scan, **attrs.asdict(analysis)}
        return PhaseResult(
            output=output,
            summary=f"Analyzed {scan['file_count']} files, "
            f"confidence {analysis.overall_confidence}",
        )

    def heuristic_analysis(self, ctx: Any, error: Exception) -> PhaseResult:
        scan = scan_project(self._project())
        language = next(iter(scan["languages"]), "unknown")
        output = {
            "scan": scan,
            "technology_stack": {
                "primary_language": language,
                "frameworks": scan["frameworks"],
                "confidence": 0.3,
            },
            "architecture_pattern": "unknown",
            "layers": [],
            "patterns": [],
            "overall_confidence": 0.3,
            "fallback_reason": str(error),
        }
        return PhaseResult(output=output, summary=f"Heuristic analysis (agent failed: {error})")

    @phase(2)
    def manifest_generation(self, ctx: Any) -> PhaseResult:
        analysis = ctx.output("codebase_analysis")
        stack = analysis["technology_stack"]
        manifest = {
            "name": self.inputs["template_name"],
            "language": stack["primary_language"],
            "frameworks": stack["frameworks"],
            "architecture": analysis["architecture_pattern"],
            "layers": analysis["layers"],
            "source_file_count": analysis["scan"]["file_count"],
        }
        path = ctx.output_path / "manifest.json"
        ctx.step("write_manifest", write_text, path, json.dumps(manifest, indent=2) + "\n")
        return PhaseResult(output=manifest, summary="Generated manifest.json")

    @phase(3)
    def settings_generation(self, ctx: Any) -> PhaseResult:
        analysis = ctx.output("codebase_analysis")
        settings = {
            "naming": {"modules": "snake_case", "classes": "PascalCase"},
            "layers": {layer: f"src/{layer}" for layer in analysis["layers"]},
            "testing": {
                "framework": "pytest"
                if "pytest" in analysis["technology_stack"]["frameworks"]
                else "none"
            },
        }
        path = ctx.output_path / "settings.json"
        ctx.step("write_settings", write_text, path, json.dumps(settings, indent=2) + "\n")
        return PhaseResult(output=settings, summary="Generated settings.json")

    @phase(4)
    def template_files(self, ctx: Any) -> PhaseResult:
        scan = ctx.output("codebase_analysis")["scan"]
        sources = [f for f in scan["files"] if f.endswith((".py", ".ts", ".tsx"))][:6]

        def copy_templates() -> list[str]:
            written = []
            for relative in sources:
                text = (self._project() / relative).read_text(encoding="utf-8")
                target = ctx.output_path / "templates" / (relative + ".template")
                written.append(write_text(target, text))
            return [Path(w).relative_to(ctx.output_path).as_posix() for w in written]

        written = ctx.step("copy_templates", copy_templates)
        for path in written:  # events of our own, in the run's events.ndjson (once each)
            ctx.event("template.file_written", {"path": path})
        return PhaseResult(
            output={"templates": written}, summary=f"Wrote {len(written)} template files"
        )

    @phase(5)
    def agent_recommendation(self, ctx: Any) -> PhaseResult:
        analysis = ctx.output("codebase_analysis")
        roles = [f"{layer}-specialist" for layer in analysis["layers"][:3]] or ["code-specialist"]
        if analysis["scan"]["has_tests"]:
            roles.append("testing-specialist")
        return PhaseResult(output={"agents": roles}, summary=f"Recommended {len(roles)} agents")

    @phase(6, asks_agents=True)
    def agent_creation(self, ctx: Any) -> PhaseResult:
        roles = ctx.output("agent_recommendation")["agents"]
        analysis = ctx.output("codebase_analysis")
        asks = [
            Ask(
                agent="agent-content-enhancer",
                prompt=(
                    f"# Agent Creation Request\n\nCreate the agent '{role}' for a "
                    f"{analysis['technology_stack']['primary_language']} project using "
                    f"{', '.join(analysis['technology_stack']['frameworks'])}, architecture "
                    f"{analysis['architecture_pattern']}. Answer with JSON: name, description, "
                    "body (markdown instructions for the agent)."
                ),
                output_type=AgentDefinition,
            )
            for role in roles
        ]
        agents = ctx.ask_all(asks)
        return PhaseResult(
            output={"agents": [attrs.asdict(a) for a in agents]},
            summary=f"Created {len(agents)} agents",
        )

    @phase(7, asks_agents=True)
    def agent_enhancement(self, ctx: Any) -> PhaseResult:
        agents = ctx.output("agent_creation")["agents"]
        patterns = ctx.output("codebase_analysis")["patterns"]
        asks = [
            Ask(
                agent="agent-content-enhancer",
                prompt=(
                    f"# Agent Enhancement Request\n\nEnhance the agent '{agent['name']}' with "
                    f"concrete guidance for the patterns {', '.join(patterns)}. Current body:\n\n"
                    f"{agent['body']}\n\nAnswer with JSON: name, description, body."
                ),
                output_type=AgentDefinition,
            )
            for agent in agents
        ]
        enhanced = ctx.ask_all(asks)

        def write_agents() -> list[str]:
            return [
                Path(
                    write_text(
                        ctx.output_path / "agents" / f"{a.name}.md",
                        f"# {a.name}\n\n{a.description}\n\n{a.body}\n",
                    )
                ).name
                for a in enhanced
            ]

        files = ctx.step("write_agents", write_agents)
        return PhaseResult(output={"agent_files": files}, summary=f"Enhanced {len(files)} agents")

    @phase(8)
    def claude_md_generation(self, ctx: Any) -> PhaseResult:
        manifest = ctx.output("manifest_generation")
        agents = ctx.output("agent_enhancement")["agent_files"]
        text = (
            f"# {manifest['name']}\n\nLanguage: {manifest['language']}\n"
            f"Frameworks: {', '.join(manifest['frameworks'])}\n"
            f"Architecture: {manifest['architecture']}\n\n## Agents\n"
            + "".join(f"- agents/{name}\n" for name in agents)
        )
        ctx.step("write_claude_md", write_text, ctx.output_path / "CLAUDE.md", text)
        return PhaseResult(output={"file": "CLAUDE.md"}, summary="Generated CLAUDE.md")

    @phase(9)
    def template_validation(self, ctx: Any) -> PhaseResult:
        expected = ["manifest.json", "settings.json", "CLAUDE.md"]
        expected += [f"agents/{n}" for n in ctx.output("agent_enhancement")["agent_files"]]
        expected += ctx.output("template_files")["templates"]
        # What is on disk varies between runs: asked in a step, so a replay sees what the
        # run saw.
        missing = ctx.step("find_missing", find_missing, str(ctx.output_path), expected)
        if missing:
            raise RuntimeError(f"template incomplete, missing: {', '.join(missing)}")
        # An artifact of the phase: kept in its output directory, listed in its results.json.
        report = "# Template validation\n\n" + "".join(f"- [x] {p}\n" for p in sorted(expected))
        ctx.artifact("validation-report", "validation.md", report)
        return PhaseResult(
            output={"files": sorted(expected)}, summary=f"Validated {len(expected)} files"
        )
