"""The work directory is untrusted ground: a state is acted on only as orchestrate signed it.

Through real ``orchestrate`` processes and real files: a state edited by hand (its
workflow reference, its phase, a recorded answer), or with its signature removed, is
refused by every command that acts on it, in one line, before any workflow module is
imported and with nothing in the work directory changed (bytes and times); ``orchestrate
trust`` signs it as it is, and the run goes on. The key is made 0600 on first use and a
key others can read is refused. A signed state whose phase does not agree with the
workflow is refused as damaged.
"""

from __future__ import annotations

import hmac
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.formats.state_signature import ENGINE_KEY, PARTS, signed_parts
from orchestrator.storage import runs
from orchestrator.storage.state_key import (
    check_signature,
    hmac_sha256_hex,
    judge_signature,
    key_file,
    load_key,
)
from support.cli import orchestrate
from support.signing_support import edit_state, sign_state_file, signature_holds

# A workflow that counts its imports: every import appends a line to imports.log beside it.
FLOW = """
from pathlib import Path

from orchestrator import Workflow, phase

with open(Path(__file__).with_name("imports.log"), "a", encoding="utf-8") as log:
    log.write("imported\\n")

PROMPT = "You are a careful writer. Answer the question below in one short paragraph, " \\
    "plain text, no headings, no lists, nothing else. Question: {}"


class Signed(Workflow):
    name = "signed"
    agents = ("writer",)

    @phase(1)
    def draft(self, ctx):
        return ctx.ask("writer", PROMPT.format("what is a tide?"))

    @phase(2)
    def review(self, ctx):
        return ctx.ask("writer", PROMPT.format("is this right? " + ctx.output("draft")))

    @phase(3)
    def publish(self, ctx):
        return {"draft": ctx.output("draft"), "review": ctx.output("review")}
"""

# What an attacker would have resume import: it leaves a marker when it is imported.
EVIL = """
from pathlib import Path

Path(__file__).with_name("MARKER").write_text("imported")

from orchestrator import Workflow, phase


class Signed(Workflow):
    name = "signed"

    @phase(1)
    def draft(self, ctx):
        return "owned"
"""

STATE = ".signed-state.json"


class Run:
    """One ``signed`` instance in ``root/work``, its workflow file in ``root/flow``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.flow_dir = root / "flow"
        self.flow_dir.mkdir()
        self.flow = self.flow_dir / "signed_flow.py"
        self.flow.write_text(FLOW)
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.state_path = self.workdir / STATE

    @property
    def reference(self) -> str:
        return f"{self.flow}:Signed"

    def imports(self) -> int:
        log = self.flow_dir / "imports.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def cli(self, *args: object, env: dict[str, str] | None = None) -> Any:
        return orchestrate(*args, env=env)

    def start(self) -> None:
        assert self.cli("run", self.reference, "--workdir", self.workdir).returncode == 42

    def answer(self, text: str, *, expect: int = 42) -> None:
        responded = self.cli("respond", "--workdir", self.workdir, "--text", text)
        assert responded.returncode == 0, responded.stderr
        resumed = self.cli("resume", "--workdir", self.workdir)
        assert resumed.returncode == expect, resumed.stderr

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_bytes())  # type: ignore[no-any-return]

    def edit(self, change: Callable[[dict[str, Any]], object]) -> None:
        """Change the state by hand, as an agent or a person with a text editor would."""
        data = self.state()
        change(data)
        self.state_path.write_text(json.dumps(data, indent=2))


def snapshot(*roots: Path) -> dict[str, tuple[bytes, int]]:
    """Every file and directory under ``roots``: its bytes (files) and its mtime."""
    seen: dict[str, tuple[bytes, int]] = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))]:
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
            seen[str(path)] = (data, info.st_mtime_ns)
    return seen


def acting_commands(run: Run, fork_target: Path) -> list[list[object]]:
    """Every command that acts on the state in ``run.workdir``."""
    w = ["--workdir", run.workdir]
    return [
        ["resume", *w],
        ["retry", *w],
        ["rewind", "--to", "draft", *w],
        ["respond", "--text", "an answer", *w],
        ["drive", "--handler", f"{sys.executable} -c 'print(1)'", *w],
        ["cancel", *w],
        ["fork", "--source", run.workdir, "--from", "draft", "--workdir", fork_target],
        ["replay", run.reference, "--run", run.state_path],
    ]


def assert_refused_by_every_command(run: Run, *fragments: str) -> None:
    """Each acting command refuses in one line naming the state file and the way out,
    imports nothing, and changes nothing on disk."""
    fork_target = run.root / "fork"
    fork_target.mkdir(exist_ok=True)
    before = snapshot(run.workdir, fork_target, run.flow_dir)
    imports = run.imports()
    for command in acting_commands(run, fork_target):
        result = run.cli(*command)
        assert result.returncode == 1, (command, result.stderr)
        (line,) = result.stderr.splitlines()
        assert line.startswith("orchestrate: error: "), line
        expected = (f"{run.state_path}: ", f"orchestrate trust {run.state_path}' signs it")
        for fragment in (*expected, "orchestrate cancel --force", *fragments):
            assert fragment in line, (command, line)
        assert run.imports() == imports, f"{command[0]} imported the workflow"
        assert snapshot(run.workdir, fork_target, run.flow_dir) == before, command[0]


# -- states edited by hand are refused before any import ---------------------------------


@pytest.mark.slow
def test_a_workflow_reference_edited_to_another_module_is_never_imported(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.start()
    evil = tmp_path / "elsewhere" / "evil.py"
    evil.parent.mkdir()
    evil.write_text(EVIL)
    run.edit(lambda s: s["phase_data"][ENGINE_KEY].update(workflow=f"{evil}:Signed"))
    assert_refused_by_every_command(
        run, "the engine's record of the run (its workflow", "$.phase_data.x_orchestrator;"
    )
    assert not (evil.parent / "MARKER").exists()
    status = run.cli("status", "--workdir", run.workdir)  # status shows it, and says so
    assert status.returncode == 0, status.stderr
    assert "signature  NOT VALID: changed since orchestrate signed it" in status.stdout
    assert f"orchestrate trust {run.state_path}" in status.stdout
    shown = json.loads(run.cli("status", "--json", "--workdir", run.workdir).stdout)
    assert shown["signature"] == "not valid"
    assert "the engine's record of the run" in shown["signature_problem"]
    assert not (evil.parent / "MARKER").exists()


@pytest.mark.slow
def test_a_phase_moved_on_by_hand_is_refused(tmp_path: Path) -> None:
    """The phase moved to a later one, consistently: the phase would run with the
    outputs of the one before missing."""
    run = Run(tmp_path)
    run.start()
    run.edit(lambda s: s.update(phase=2, phase_name="review"))
    assert_refused_by_every_command(run, "signed it: the phase and the other top-level fields;")


@pytest.mark.slow
def test_a_recorded_answer_changed_by_hand_is_refused_then_trusted_and_resumed(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path)
    run.start()
    run.answer("Tides are the sea rising and falling.")  # recorded; phase 2 waits now
    run.edit(lambda s: s["agent_requests"][0]["x_response"].update(response="Tides are a myth."))
    assert_refused_by_every_command(run, "the recorded requests and answers", "$.agent_requests")

    trusted = run.cli("trust", run.state_path)
    assert trusted.returncode == 0, trusted.stderr
    assert f"signed {run.state_path} as it is now: workflow {run.reference}" in trusted.stderr
    assert "phase 2 (review)" in trusted.stderr
    assert "changed since it was signed: the recorded requests and answers" in trusted.stderr
    assert run.state()["agent_requests"][0]["x_response"]["response"] == "Tides are a myth."
    run.answer("Yes, that is right.", expect=0)  # the run goes on from the state as trusted


@pytest.mark.slow
def test_a_workflow_file_that_moved_is_trusted_by_hand_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """The ordinary reason to edit a state: the workflow file moved."""
    run = Run(tmp_path)
    run.start()
    moved = tmp_path / "moved" / "signed_flow.py"
    moved.parent.mkdir()
    moved.write_text(FLOW)
    run.edit(lambda s: s["phase_data"][ENGINE_KEY].update(workflow=f"{moved}:Signed"))
    refused = run.cli("resume", "--workdir", run.workdir)
    assert refused.returncode == 1 and "the engine's record of the run" in refused.stderr
    assert run.cli("trust", run.state_path).returncode == 0
    run.answer("Tides are the sea rising and falling.")
    assert (moved.parent / "imports.log").exists()


@pytest.mark.slow
def test_a_state_without_its_signature_is_refused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.start()
    run.edit(lambda s: s["phase_data"][ENGINE_KEY].pop("x_signature"))
    assert_refused_by_every_command(
        run, "the state carries no signature", "$.phase_data.x_orchestrator.x_signature"
    )
    assert run.cli("trust", run.state_path).returncode == 0
    run.answer("Tides are the sea rising and falling.")


def test_a_state_signed_with_another_key_is_refused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    other = {"ORCHESTRATOR_KEY_FILE": str(tmp_path / "other-user" / "state.key")}
    assert run.cli("run", run.reference, "--workdir", run.workdir, env=other).returncode == 42
    before = snapshot(run.workdir)
    refused = run.cli("resume", "--workdir", run.workdir)
    assert refused.returncode == 1
    assert "it was signed with another key than" in refused.stderr, refused.stderr
    assert snapshot(run.workdir) == before
    assert run.imports() == 1  # the run's own import, none since


def test_an_unsigned_edit_is_refused_in_process_too(tmp_path: Path) -> None:
    """The engine itself, not only the command line, reads no state it did not sign."""
    from orchestrator._errors import StateUntrustedError
    from orchestrator.testing import WorkflowHarness

    run = Run(tmp_path)
    run.start()
    sys.path.insert(0, str(run.flow_dir))
    try:
        import signed_flow  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(run.flow_dir))
    run.edit(lambda s: s.update(checkpoint_name="edited"))
    before = run.state_path.read_bytes()
    with pytest.raises(StateUntrustedError, match="the phase and the other top-level fields"):
        WorkflowHarness(signed_flow.Signed, run.workdir).resume()
    assert run.state_path.read_bytes() == before


@pytest.mark.slow
def test_a_finished_run_whose_history_was_edited_is_not_rewound_or_forked(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path)
    run.start()
    run.answer("one")
    run.answer("two", expect=0)
    (history,) = (run.workdir / ".orchestrator" / "runs").glob("*/state.json")
    assert signature_holds(history)
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL)
    data = json.loads(history.read_bytes())
    data["phase_data"][ENGINE_KEY]["workflow"] = f"{evil}:Signed"
    history.write_text(json.dumps(data))
    target = tmp_path / "fork"
    target.mkdir()
    before = snapshot(run.workdir, target)
    for command in (
        ["rewind", "--to", "review", "--workdir", run.workdir],
        ["fork", "--source", run.workdir, "--from", "review", "--workdir", target],
    ):
        result = run.cli(*command)
        assert result.returncode == 1, result.stderr
        assert f"orchestrate trust {history}" in result.stderr
    assert snapshot(run.workdir, target) == before
    assert not (tmp_path / "MARKER").exists()


# -- orchestrate trust ----------------------------------------------------------------------


def test_trust_leaves_a_state_already_signed_as_it_is(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.start()
    before = snapshot(run.workdir)
    result = run.cli("trust", run.state_path)
    assert result.returncode == 0, result.stderr
    assert "is already signed with your key" in result.stderr
    assert f"workflow {run.reference}" in result.stderr and "phase 1 (draft)" in result.stderr
    assert snapshot(run.workdir) == before


@pytest.mark.parametrize(
    "make",
    [
        lambda d: (d / "response.json").write_text('{"request_id": "x", "status": "success"}'),
        lambda d: (d / "state.json").write_text('{"phase": 1}'),
        lambda d: (d / "state.json").write_text("not json"),
        lambda d: (d / "state.json").symlink_to(d / "elsewhere.json"),
    ],
    ids=["a-response", "half-a-state", "not-json", "a-link"],
)
def test_trust_refuses_what_is_not_a_state_of_this_engine(
    tmp_path: Path, make: Callable[[Path], object]
) -> None:
    (tmp_path / "elsewhere.json").write_text("{}")
    make(tmp_path)
    (target,) = [p for p in tmp_path.iterdir() if p.name != "elsewhere.json"]
    before = snapshot(tmp_path)
    result = orchestrate("trust", target)
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"orchestrate: error: {target}: ")
    assert "not a state of this engine" in line or "symbolic link" in line
    assert snapshot(tmp_path) == before


def test_trust_prints_what_it_signed_with_control_characters_escaped(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.start()
    run.edit(lambda s: s["phase_data"][ENGINE_KEY].update(workflow="\x1b[2Jx.py:Signed"))
    result = run.cli("trust", run.state_path)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr and "\\u001b[2Jx.py:Signed" in result.stderr


def test_every_option_of_trust_has_help() -> None:
    result = orchestrate("trust", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "STATE the state file" in text and "or a run's state.json" in text
    assert "once you have checked it" in text


# -- the key ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_key_is_made_0600_on_first_use_and_kept(tmp_path: Path) -> None:
    key = tmp_path / "config" / "checkpoint-orchestrator" / "state.key"
    env = {"ORCHESTRATOR_KEY_FILE": str(key)}
    run = Run(tmp_path)
    assert run.cli("run", run.reference, "--workdir", run.workdir, env=env).returncode == 42
    info = key.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    material = key.read_bytes()
    assert len(material) == 65 and material.endswith(b"\n")
    int(material[:-1], 16)  # 64 hex digits
    assert run.cli("status", "--workdir", run.workdir, env=env).stdout.count("NOT VALID") == 0
    assert run.cli("resume", "--workdir", run.workdir, env=env).returncode == 42
    assert key.read_bytes() == material


def test_the_key_under_xdg_config_home_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_KEY_FILE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert key_file() == tmp_path / "xdg" / "checkpoint-orchestrator" / "state.key"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert key_file() == tmp_path / "home" / ".config" / "checkpoint-orchestrator" / "state.key"
    monkeypatch.setenv("ORCHESTRATOR_KEY_FILE", "relative.key")
    with pytest.raises(Exception, match="is not an absolute path"):
        key_file()


@pytest.mark.slow
def test_processes_that_make_the_key_at_once_agree_on_it(tmp_path: Path) -> None:
    key = tmp_path / "race" / "state.key"
    code = (
        "from orchestrator.storage.state_key import load_key; print(load_key(create=True).decode())"
    )
    env = {**os.environ, "ORCHESTRATOR_KEY_FILE": str(key)}
    racers = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    keys = {racer.communicate(timeout=60)[0].strip() for racer in racers}
    assert keys == {key.read_text().strip()}
    assert [p.name for p in key.parent.iterdir()] == ["state.key"]  # no temporary left


@pytest.mark.slow
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604], ids=["0644", "0640", "0604"])
def test_a_key_others_can_read_is_refused_and_nothing_changes(tmp_path: Path, mode: int) -> None:
    key = tmp_path / "keys" / "state.key"
    env = {"ORCHESTRATOR_KEY_FILE": str(key)}
    run = Run(tmp_path)
    assert run.cli("run", run.reference, "--workdir", run.workdir, env=env).returncode == 42
    key.chmod(mode)
    before = snapshot(run.workdir)
    for command in (["resume", "--workdir", run.workdir], ["trust", run.state_path]):
        result = run.cli(*command, env=env)
        assert result.returncode == 1, result.stderr
        (line,) = result.stderr.splitlines()
        assert f"{key}: the signing key can be read by others (mode {mode:04o})" in line
        assert f"chmod 600 {key}" in line
    assert snapshot(run.workdir) == before
    assert run.imports() == 1


def test_a_key_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "state.key"
    key.write_text("0" * 64 + "\n")
    key.chmod(0o600)
    monkeypatch.setenv("ORCHESTRATOR_KEY_FILE", str(key))
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 4242)
    with pytest.raises(Exception, match=r"belongs to uid \d+, not to you"):
        load_key(create=False)


def test_a_key_inside_the_work_directory_is_refused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    inside = {"ORCHESTRATOR_KEY_FILE": str(run.workdir / "keys" / "state.key")}
    result = run.cli("run", run.reference, "--workdir", run.workdir, env=inside)
    assert result.returncode == 1
    assert "the signing key is inside the work directory" in result.stderr
    assert not run.state_path.exists()


# -- phase consistency: a signed state whose phase the workflow does not have -----------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda s: s.update(phase=99), "phase is 99, but phase_name 'review' is phase 2"),
        (lambda s: s.update(phase=1, phase_name="review"), "phase_name 'review' is phase 2"),
        (lambda s: s.update(phase_name="drafting"), "phase_name 'drafting' is not a phase"),
        (
            lambda s: s["completed_phases"].append(
                {**s["completed_phases"][0], "phase": 3, "phase_name": "publish"}
            ),
            "completed phase 3 'publish'",
        ),
    ],
    ids=["phase-99", "phase-and-name-differ", "unknown-name", "completed-after-current"],
)
def test_a_signed_state_whose_phase_the_workflow_lacks_is_damaged(
    tmp_path: Path, change: Callable[[dict[str, Any]], object], where: str
) -> None:
    run = Run(tmp_path)
    run.start()
    run.answer("Tides are the sea rising and falling.")  # in phase 2, phase 1 completed
    responded = run.cli("respond", "--workdir", run.workdir, "--text", "right")
    assert responded.returncode == 0
    edit_state(run.state_path, change)  # an edit someone trusted: the signature holds
    lock = str(run.workdir / ".orchestrator" / "signed.lock")  # holds the last holder's pid
    before = {k: v for k, v in snapshot(run.workdir).items() if k != lock}
    for command in ("resume", "retry", "cancel"):
        result = run.cli(command, "--workdir", run.workdir)
        assert result.returncode == 1, result.stderr
        (line,) = result.stderr.splitlines()
        assert f"{run.state_path}: " in line and where in line, line
        assert "orchestrate cancel --force" in line
        after = {k: v for k, v in snapshot(run.workdir).items() if k != lock}
        assert after == before, "the answer must not be used up"
    forced = run.cli("cancel", "--force", "--workdir", run.workdir)
    assert forced.returncode == 0, forced.stderr
    assert not run.state_path.exists()


# -- the signature itself ------------------------------------------------------------------


def test_the_mac_is_hmac_sha256() -> None:
    """RFC 4231's test cases 1, 2 and 6 (a key longer than a block), and the stdlib's."""
    assert (
        hmac_sha256_hex(b"\x0b" * 20, b"Hi There")
        == "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    )
    assert (
        hmac_sha256_hex(b"Jefe", b"what do ya want for nothing?")
        == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
    assert (
        hmac_sha256_hex(b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First")
        == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    )
    for key in (b"", b"k" * 64, b"k" * 65, os.urandom(32)):
        expected = hmac.new(key, b"message", "sha256").hexdigest()
        assert hmac_sha256_hex(key, b"message") == expected


def test_every_field_of_the_state_is_in_one_signed_part(tmp_path: Path) -> None:
    """A field added to any place of the state, or changed, breaks the signature."""
    run = Run(tmp_path)
    run.start()
    data = run.state()
    check_signature(data, source="state")
    names = [name for name, _, _ in PARTS]
    assert [name for name, _ in signed_parts(data)] == names
    record = data["phase_data"][ENGINE_KEY]
    places: list[dict[str, Any]] = [data, data["phase_data"], record, data["agent_requests"][0]]
    for place in places:
        place["x_new"] = 1
        assert not judge_signature(data).ok
        del place["x_new"]
        assert judge_signature(data).ok
    for key in [k for k in record if k != "x_signature"]:
        kept = record.pop(key)
        assert not judge_signature(data).ok, key
        record[key] = kept
    assert ENGINE_KEY == runs.ENGINE_KEY


def test_a_signature_names_the_parts_that_changed(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.start()
    data = run.state()
    data["phase"] = 2
    data["phase_data"][ENGINE_KEY]["inputs"]["x"] = "y"
    verdict = judge_signature(data)
    assert [name for name, _, _ in verdict.changed] == ["fields", "record"]
    data["phase_data"][ENGINE_KEY]["x_signature"]["parts"]["fields"] = "0" * 8
    data["phase"] = 1
    del data["phase_data"][ENGINE_KEY]["inputs"]["x"]
    verdict = judge_signature(data)  # the hints alone changed: the signature is named
    assert not verdict.ok and verdict.changed == ()


@pytest.mark.slow
def test_a_signed_state_file_still_reads_as_it_did(tmp_path: Path) -> None:
    """One line per top-level field, phase output and request; the signature inside the
    engine's record, on its line."""
    run = Run(tmp_path)
    run.start()
    run.answer("Tides are the sea rising and falling.")
    lines = run.state_path.read_text().splitlines()
    record_lines = [line for line in lines if line.startswith('    "x_orchestrator": ')]
    assert len(record_lines) == 1 and '"x_signature": {"hmac_sha256": "' in record_lines[0]
    assert lines[0] == "{" and lines[1] == '  "phase": 2,'
    sign_state_file(run.state_path)  # signing again, as trust does, gives the same bytes
    assert run.state_path.read_text().splitlines() == lines


def test_bytes_checked_once_are_not_a_way_around_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``resume`` checks the state before the import and again under the lock; the second
    check of the same bytes is free, but other bytes, or another key, are checked anew."""
    from orchestrator._errors import StateUntrustedError
    from orchestrator.storage.state_key import ReadMemo

    run = Run(tmp_path)
    run.start()
    raw = run.state_path.read_bytes()
    reads = ReadMemo()  # the command's, kept from the first check to the second
    check_signature(json.loads(raw), source="state", raw=raw, reads=reads)
    check_signature(json.loads(raw), source="state", raw=raw, reads=reads)
    changed = raw.replace(b'"phase": 1,', b'"phase": 2,', 1)
    assert changed != raw
    with pytest.raises(StateUntrustedError, match="the phase"):
        check_signature(json.loads(changed), source="state", raw=changed, reads=reads)
    monkeypatch.setenv("ORCHESTRATOR_KEY_FILE", str(tmp_path / "another" / "state.key"))
    load_key(create=True)
    with pytest.raises(StateUntrustedError, match="signed with another key"):
        check_signature(json.loads(raw), source="state", raw=raw, reads=reads)


# -- the signature over the file ----------------------------------------------------------


def _resumed(run: Run) -> Any:
    run.cli("respond", "--workdir", run.workdir, "--text", "Tides are the sea moving.")
    return run.cli("resume", "--workdir", run.workdir)


@pytest.mark.slow
def test_a_state_is_signed_over_its_file_so_the_same_data_in_other_bytes_is_refused(
    tmp_path: Path,
) -> None:
    """What is checked is the file: the same JSON data laid out otherwise (one space
    less in a request's line) is not what orchestrate wrote, and is refused."""
    run = Run(tmp_path)
    run.start()
    raw = run.state_path.read_bytes()
    assert judge_signature(json.loads(raw), raw).ok
    assert run.state()["phase_data"][ENGINE_KEY]["x_signature"]["covers"] == "segments"
    squeezed = raw.replace(b'"agent_name": "writer"', b'"agent_name":"writer"', 1)
    assert squeezed != raw and json.loads(squeezed) == json.loads(raw)
    run.state_path.write_bytes(squeezed)
    assert_refused_by_every_command(run, "changed since orchestrate signed it")
    assert run.state_path.read_bytes() == squeezed


@pytest.mark.slow
def test_a_state_signed_over_its_parts_still_resumes(tmp_path: Path) -> None:
    """States written before the signature covered the file carry one over their parts;
    they resume as they are, and are signed over the file from the next save on."""
    from orchestrator.formats.strict_json import dumps_canonical
    from orchestrator.storage.state_key import sign_state_data

    run = Run(tmp_path)
    run.start()
    data = run.state()
    run.state_path.write_bytes(dumps_canonical(sign_state_data(data)))
    assert "covers" not in run.state()["phase_data"][ENGINE_KEY]["x_signature"]
    assert signature_holds(run.state_path)
    assert _resumed(run).returncode == 42
    assert run.state()["phase_data"][ENGINE_KEY]["x_signature"]["covers"] == "segments"


@pytest.mark.slow
def test_a_state_signed_over_its_whole_file_still_resumes(tmp_path: Path) -> None:
    """States written before the signature was cut into segments carry one over the
    whole file (and the parts' digests beside it); they resume as they are, and are
    signed over their segments from the next save on."""
    from orchestrator.formats.strict_json import dumps_canonical
    from orchestrator.storage import state_key

    run = Run(tmp_path)
    run.start()
    data = run.state()
    del data["phase_data"][ENGINE_KEY]["x_signature"]
    unsigned = dumps_canonical(state_key.with_signature(data, state_key._MARK))
    key = state_key.load_key(create=False)
    fields = {
        "key_id": state_key._key_id(key),
        "parts": {name: digest[:8] for name, digest in state_key._digests(data)},
        "covers": "file",
    }
    signature = {"hmac_sha256": state_key._file_mac(key, fields, unsigned), **fields}
    text = b'"x_signature": ' + json.dumps(signature, separators=(", ", ": ")).encode()
    old = unsigned.replace(state_key._member(state_key._MARK_TEXT), text)
    run.state_path.write_bytes(old)
    assert json.loads(old)["phase_data"][ENGINE_KEY]["x_signature"]["covers"] == "file"
    assert state_key.data_if_signed(old) == json.loads(old)
    assert signature_holds(run.state_path)
    run.state_path.write_bytes(old.replace(b'"phase": 1', b'"phase": 2'))
    assert not signature_holds(run.state_path)  # what changed is still told
    run.state_path.write_bytes(old)
    assert _resumed(run).returncode == 42
    assert run.state()["phase_data"][ENGINE_KEY]["x_signature"]["covers"] == "segments"


def test_a_second_copy_of_the_signature_in_the_file_is_refused(tmp_path: Path) -> None:
    """The signature's text must stand in the file once: a copy of it put in a phase's
    output leaves the reader unable to tell which one was signed."""
    run = Run(tmp_path)
    run.start()
    raw = run.state_path.read_bytes()
    data = json.loads(raw)
    signature = data["phase_data"][ENGINE_KEY]["x_signature"]
    text = json.dumps(signature, separators=(", ", ": "))
    assert f'"x_signature": {text}'.encode() in raw
    doubled = raw.replace(
        b'\n  "phase_data": {\n',
        b'\n  "phase_data": {\n    "x_copy": {"x_signature": ' + text.encode() + b"},\n",
        1,
    )
    assert judge_signature(json.loads(doubled), doubled).ok is False


def test_a_state_holding_the_mark_is_signed_over_its_parts(tmp_path: Path) -> None:
    """Should a state's own data hold the text that stands for the signature while it is
    made, the state is signed over its parts, which every reader checks too."""
    from orchestrator.storage import state_key

    run = Run(tmp_path)
    run.start()
    data = run.state()
    data["phase_data"]["x_note"] = {"x_signature": state_key._MARK}
    written = state_key.signed_bytes(data, {})
    assert "covers" not in json.loads(written)["phase_data"][ENGINE_KEY]["x_signature"]
    assert judge_signature(json.loads(written), written).ok


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(
    st.binary(min_size=2, max_size=40).map(lambda b: bytes(97 + x % 3 for x in b)),
    st.sampled_from([b"ab", b"aba", b"ca"]),
    st.data(),
)
def test_a_second_mark_is_found_wherever_the_last_save_does_not_vouch(
    text: bytes, mark: bytes, data: st.DataObject
) -> None:
    """A save looks for a second mark only outside the ranges that agree with the last
    save's segments (which held none): where no mark lies wholly in a range, it finds
    one wherever a whole search finds one, one that straddles a range's edge too."""
    from hypothesis import assume

    from orchestrator.storage.state_key import _mark_elsewhere

    at = text.find(mark)
    assume(at >= 0)
    edges = data.draw(st.lists(st.integers(0, len(text)), max_size=8).map(sorted))
    vouched = []
    for start, end in zip(edges[::2], edges[1::2], strict=False):
        if start < end and text.find(mark, start, end) < 0:  # none wholly inside
            vouched.append((start, end))
    everywhere = [p for p in range(len(text)) if text.startswith(mark, p)]
    assert _mark_elsewhere(text, mark, at, vouched) == (everywhere != [at])


def test_a_mark_in_an_output_late_in_a_long_run_has_the_state_signed_over_its_parts(
    tmp_path: Path,
) -> None:
    """Saves of a long run look for a second mark in what changed since the last save:
    an output that holds the mark's text, late in the run (its outputs long enough to be
    hashed on from the last save's), has that state and every later one signed over its
    parts, which every reader checks; the states before it, over the file's segments."""
    from orchestrator import Workflow, phase
    from orchestrator.storage import state_key
    from orchestrator.testing import WorkflowHarness

    def make(number: int) -> Callable[[Any, Any], Any]:
        def run(self: Any, ctx: Any) -> Any:
            ctx.ask("writer", f"Write the note of phase {number} for the survey, one line. " * 2)
            if number == 25:
                return {"note": {"x_signature": state_key._MARK}}
            return {"text": f"{number} " * 1500}

        return run

    methods = {f"p{n:02d}": phase(n, name=f"p{n:02d}")(make(n)) for n in range(1, 31)}
    flow = type("Thirty", (Workflow,), {"name": "thirty", "agents": ("writer",), **methods})
    harness = WorkflowHarness(flow, tmp_path)
    outcome, covers = harness.run(), []
    while outcome.status == "paused":
        harness.respond(outcome.pending[0].request_id, "A note.")
        outcome = harness.resume()
        if outcome.status == "paused":
            raw = (tmp_path / ".thirty-state.json").read_bytes()
            signature = json.loads(raw)["phase_data"][ENGINE_KEY]["x_signature"]
            covers.append(signature.get("covers"))
            assert judge_signature(json.loads(raw), raw).ok
    assert outcome.status == "completed", outcome.message
    # The 25th output is saved when the 26th phase asks: the 25th pause after the first.
    assert covers[:24] == ["segments"] * 24
    assert covers[24:] == [None] * 5


def test_a_peek_hands_its_parse_to_the_next_read_of_the_same_bytes_once(
    tmp_path: Path,
) -> None:
    """``resume`` looks at the state for the workflow's name, then reads it whole: the
    bytes are parsed once. The parse is handed on once, only for the same bytes, and
    only from a caller that said it only looks."""
    from orchestrator._errors import StateUntrustedError
    from orchestrator.storage.state_key import ReadMemo, read_signed

    run = Run(tmp_path)
    run.start()
    raw = run.state_path.read_bytes()
    reads = ReadMemo()  # the command's, handed to the bridge it builds
    peeked, _ = read_signed(raw, source="state", peek=True, reads=reads)
    assert read_signed(raw, source="state")[0] is not peeked  # without the memo: not handed
    taken, written_here = read_signed(bytes(bytearray(raw)), source="state", reads=reads)
    assert taken is peeked and written_here
    again, _ = read_signed(raw, source="state", reads=reads)
    assert again == peeked and again is not peeked  # handed on once
    looked, _ = read_signed(raw, source="state", reads=reads)  # not a peek: nothing kept
    assert read_signed(raw, source="state", reads=reads)[0] is not looked
    read_signed(raw, source="state", peek=True, reads=reads)
    other = raw.replace(b'"phase": 1,', b'"phase": 1 ,', 1)
    with pytest.raises(StateUntrustedError):
        read_signed(other, source="state", reads=reads)  # other bytes: checked, and refused
    assert read_signed(raw, source="state", reads=reads)[0] is not peeked


@pytest.mark.slow
def test_a_resume_parses_the_state_once(tmp_path: Path) -> None:
    """A new process resuming a run checks and parses its state's bytes once, though it
    reads them twice (for the workflow's name before the import, then under the lock)."""
    run = Run(tmp_path)
    run.start()
    assert run.cli("respond", "--workdir", run.workdir, "--text", "Tides.").returncode == 0
    size = run.state_path.stat().st_size
    code = (
        "import json, sys; from orchestrator.cli.main import main; parses = []; "
        "loads = json.loads; "
        "json.loads = lambda s, *a, **k: (parses.append(len(s)), loads(s, *a, **k))[1]; "
        f"rc = main(['resume', '--workdir', {str(run.workdir)!r}]); "
        f"print(rc, parses.count({size}))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert shown.stdout.split()[-2:] == ["42", "1"], shown.stderr
    assert run.state()["phase"] == 2


def test_bytes_a_save_wrote_are_read_without_the_careful_parser_and_others_are_not(
    tmp_path: Path,
) -> None:
    """The bytes a save wrote are known as such before they are parsed (the MAC over them
    holds), and read by the C parser alone; a byte changed anywhere, or the signature
    moved, sends them back to the careful reader, which refuses them."""
    from orchestrator.storage.state_key import data_if_signed

    run = Run(tmp_path)
    run.start()
    raw = run.state_path.read_bytes()
    assert data_if_signed(raw) == json.loads(raw)
    changed = raw.replace(b"what is a tide?", b"what is a tidE?", 1)
    assert changed != raw and data_if_signed(changed) is None
    record_line = next(line for line in raw.splitlines() if b'"x_signature": {' in line)
    signature = record_line[record_line.index(b'"x_signature": {') :].rstrip(b",")[:-1]
    moved = raw.replace(b", " + signature, b"", 1).replace(
        b'\n  "phase_data": {\n', b'\n  "phase_data": {\n    "x_moved": {' + signature + b"},\n"
    )
    assert moved != raw and data_if_signed(moved) is None
    assert data_if_signed(raw + b" ") is None


@pytest.mark.slow
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3), st.binary(max_size=40), st.integers(0, 9), st.binary(max_size=9)
        ),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=200, deadline=None)
def test_a_segment_hashed_on_from_the_last_save_has_the_digest_of_its_bytes(
    edits: list[tuple[int, bytes, int, bytes]],
) -> None:
    """A segment's hash goes on from where it agreed with the last save's bytes: whatever
    changed where (appended, cut, changed at its head or its end), and wherever the
    segment lies in its file, the digest is that of its bytes, as a fresh hash gives
    it."""
    import hashlib

    from orchestrator.storage import state_key

    segment = bytes(range(256)) * 2
    last = None
    with pytest.MonkeyPatch.context() as patch:  # short segments, short steps: every path
        patch.setattr(state_key, "_HASHED_ON_FROM", 64)
        patch.setattr(state_key, "_AGREE_STEP", 16)
        for kind, text, where, before in edits:
            at = len(segment) * where // 10
            if kind == 0:
                segment += text
            elif kind == 1:
                segment = segment[:at] + text
            elif kind == 2:
                segment = segment[:at] + text + segment[at + len(text) :]
            else:
                segment = text + segment[len(text) :]
            document = before + segment + text  # the file around it
            start, end = len(before), len(before) + len(segment)
            hasher, last = state_key._hashed_on(hashlib.sha256, document, start, end, last)
            assert hasher.hexdigest() == hashlib.sha256(segment).hexdigest()
            if last is not None:
                kept, first, stop, offset, at_offset = last
                assert (kept, first, stop) == (document, start, end)
                assert 0 <= offset <= len(segment)
                assert at_offset.hexdigest() == hashlib.sha256(segment[:offset]).hexdigest()


LONG_FLOW = """
from orchestrator import Workflow, phase


class Long(Workflow):
    name = "long"
    agents = ("writer",)

    @phase(1)
    def loop(self, ctx):
        notes = "Read the notes so far and add one line to them. " * 40
        return [ctx.ask("writer", f"Note {n}. {notes}") for n in range(60)]
"""


class _Counted:
    """A hash object that counts the bytes it takes (in ``seen``)."""

    def __init__(self, inner: Any, seen: list[int]) -> None:
        self.inner, self.seen = inner, seen

    def update(self, data: Any) -> None:
        self.seen.append(len(memoryview(data).cast("B")))
        self.inner.update(data)

    def copy(self) -> _Counted:
        return _Counted(self.inner.copy(), self.seen)

    def digest(self) -> bytes:
        return self.inner.digest()  # type: ignore[no-any-return]

    def hexdigest(self) -> str:
        return self.inner.hexdigest()  # type: ignore[no-any-return]


def test_a_long_state_read_back_is_hashed_once_and_its_save_goes_on_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a long state hashes its file once; the save that follows hashes on from
    the hashes the check took, only what changed (the answer that came in, the next
    request), where it would otherwise hash the file again, whole."""
    import importlib.util

    from orchestrator.storage import state_key
    from orchestrator.testing import WorkflowHarness

    flow = tmp_path / "long_flow.py"
    flow.write_text(LONG_FLOW)
    spec = importlib.util.spec_from_file_location("long_flow", flow)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "work").mkdir()
    harness = WorkflowHarness(module.Long, tmp_path / "work")
    outcome = harness.run()
    for _ in range(50):
        harness.respond(outcome.pending[0].request_id, "Noted. " * 30)
        outcome = harness.resume()
    (state,) = (tmp_path / "work").glob(".*-state.json")
    size = state.stat().st_size
    assert size > 2 * state_key._HASHED_ON_FROM  # long enough to be hashed on

    seen: list[int] = []
    real = state_key.sha256_constructor

    def counting(size: int = 0) -> Any:
        constructor = real(size)

        def sha256(data: Any = b"") -> _Counted:
            counted = _Counted(constructor(), seen)
            counted.update(data)
            return counted

        return sha256

    monkeypatch.setattr(state_key, "sha256_constructor", counting)
    harness.handoff.clear()  # as a new process: the state is read back, and checked
    harness.respond(outcome.pending[0].request_id, "Noted. " * 30)
    outcome = harness.resume()
    assert outcome.status == "paused" and len(outcome.pending) == 1
    assert size < sum(seen) < size + size // 4, (sum(seen), size)
    assert state_key.data_if_signed(state.read_bytes()) is not None  # no memo: checked
