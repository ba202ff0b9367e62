"""The package as a user gets it: a wheel built from the checkout holds the schemas, the
migrations and the UI's static files, and installed in a fresh environment outside the
repository, ``orchestrate init demo`` and its test pass there; an editable install and a
wheel build print no warning from the build backend.

No package index is asked: the wheel is built without build isolation, and the fresh
environment finds the runtime dependencies (attrs, cattrs, pytest, ...) in this test
environment's site-packages, after its own, so the ``orchestrator`` it imports is the
wheel's.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# What a build reads from the checkout; the rest (caches, environments, git) stays behind.
LEFT_BEHIND = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", ".*_cache", ".hypothesis"
)


def pip(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def assert_quiet(done: subprocess.CompletedProcess[str]) -> None:
    """Nothing from the build backend: no setuptools warning of any kind."""
    printed = done.stdout + done.stderr
    assert "BuildBackendWarning" not in printed, printed
    assert "SetuptoolsWarning" not in printed and "!!" not in printed, printed


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("checkout") / "checkpoint-orchestrator"
    shutil.copytree(REPO, copy, symlinks=True, ignore=LEFT_BEHIND)
    return copy


@pytest.fixture(scope="module")
def wheel(checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    done = pip("wheel", "--no-deps", "--no-build-isolation", "-w", dist, ".", cwd=checkout)
    assert_quiet(done)
    (built,) = dist.glob("checkpoint_orchestrator-*.whl")
    return built


def fresh_environment(place: Path) -> Path:
    """A new virtual environment at ``place`` that falls back on this one's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", place], check=True)
    python = place / "bin" / "python"
    own = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(own) / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_holds_every_file_the_package_reads(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"orchestrator", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    for expected in [
        "orchestrator/py.typed",
        "orchestrator/adapters/file_bridge.py",
        "orchestrator/adapters/postgres/migrations/0001_runs.sql",
        "orchestrator/cli/ui/static/ui.css",
        "orchestrator/cli/ui/static/ui.js",
        "orchestrator/formats/schemas/agent-request.schema.json",
        "orchestrator/formats/schemas/board/ledger-delta.schema.json",
        "orchestrator/formats/schemas/runs/run.schema.json",
        "orchestrator/formats/schemas/steps/results.schema.json",
    ]:
        assert expected in names, expected
    in_checkout = {
        str(p.relative_to(REPO)).replace("adapters/", "orchestrator/adapters/", 1)
        if p.is_relative_to(REPO / "adapters")
        else str(p.relative_to(REPO))
        for folder in ("orchestrator", "adapters")
        for p in (REPO / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert in_checkout <= set(names), sorted(in_checkout - set(names))


def test_the_wheel_names_each_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(meta).decode())
    extras = set(metadata.get_all("Provides-Extra") or [])
    assert {"postgres", "ui", "otel", "mcp"} <= extras, extras
    required = metadata.get_all("Requires-Dist") or []
    named = [
        ("postgres", "psycopg"), ("ui", "starlette"), ("otel", "opentelemetry"), ("mcp", "mcp"),
    ]  # fmt: skip
    for extra, package in named:
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in required), extra


def test_installed_from_the_wheel_init_and_its_test_pass(wheel: Path, tmp_path: Path) -> None:
    python = fresh_environment(tmp_path / "env")
    pip("--python", python, "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    project = tmp_path / "my-project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ORCHESTRATOR_"))}
    env["ORCHESTRATOR_KEY_FILE"] = os.environ["ORCHESTRATOR_KEY_FILE"]

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(map(str, args)), cwd=project, env=env, capture_output=True, text=True,
            timeout=180, check=False,
        )  # fmt: skip

    where = run(
        python, "-c", "import orchestrator.adapters.postgres.migrations as m; print(m.__file__)"
    )
    assert where.stdout.startswith(str(tmp_path / "env")), where.stdout + where.stderr
    made = run(tmp_path / "env" / "bin" / "orchestrate", "init", "demo")
    assert made.returncode == 0, made.stderr
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "demo_test.py")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout


def test_an_editable_install_prints_no_warning(checkout: Path, tmp_path: Path) -> None:
    python = fresh_environment(tmp_path / "env")
    done = pip("--python", python, "install", "--no-deps", "--no-build-isolation", "-e", ".",
               cwd=checkout)  # fmt: skip
    assert_quiet(done)
    imported = subprocess.run(
        [python, "-c", "import orchestrator.adapters.file_bridge as f; print(f.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert imported.stdout.startswith(str(checkout / "orchestrator" / "adapters")), imported
