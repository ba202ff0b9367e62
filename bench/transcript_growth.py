"""Growing-transcript benchmark: what an agent loop that resends its transcript costs on disk.

Run it from the repository root with the project's virtualenv::

    .venv/bin/python bench/transcript_growth.py [--asks 500]

One phase asks ``--asks`` times; each prompt is the last one plus 1 KiB (a growing
transcript), each answer the same ~200 characters. The run is driven in process
(``WorkflowHarness``: respond to the pending request, resume) to completion, then the
whole work directory is measured, by area: the state file, the run's history, its
evidence, the text blobs (``.orchestrator/blobs/``) and the rest. Printed beside it:

- the floor of issue 39: twice the distinct text (the last prompt, every prompt being a
  prefix of it, plus the one answer) plus 8 MiB;
- the same prompts stored through the text blobs alone (``orchestrator.storage.blobs``):
  what the layer keeps for them;
- LangGraph's SQLite file for the same loop (``bench/peers/langgraph_transcript.py``), or
  the line saying how to install it.

A missed target never changes the exit status, which is 1 only when the workflow does not
behave. The figures are bytes, not times.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
from pathlib import Path

from peers import INSTALL_HINT, langgraph_installed

from orchestrator.storage.blobs import BLOB_DIR, FileBlobBackend, TextBlobs
from orchestrator.testing import WorkflowHarness

KIB = 1024
MIB = 1024 * KIB
ANSWER = (
    "Done. The benchmark agent read the transcript, did nothing of substance, and answers "
    "with this fixed paragraph of about two hundred characters so every answer is alike."
)
PREAMBLE = "System: you are a careful agent; the transcript so far follows.\n" + "s" * 4000

SOURCE = '''\
"""Benchmark workflow written by bench/transcript_growth.py: a growing transcript."""

from orchestrator import Workflow, phase

ASKS = @ASKS@
AGENT = "bench-agent"
PREAMBLE = @PREAMBLE@


def prompt_of(number):
    """Prompt ``number`` (from 0): the preamble and ``number + 1`` tails of 1 KiB."""
    return PREAMBLE + "".join(tail(n) for n in range(number + 1))


def tail(number):
    head = f"\\n[turn {number:05d}] user: "
    return head + "t" * (1024 - len(head))


class Transcript(Workflow):
    name = "bench-transcript"
    agents = (AGENT,)
    purpose = "growth benchmark, a growing transcript resent at every ask"

    @phase(1, name="loop")
    def loop(self, ctx):
        transcript = PREAMBLE
        answered = 0
        for number in range(ASKS):
            transcript += tail(number)
            answered += len(ctx.ask(AGENT, transcript))
        return {"asks": ASKS, "answer_chars": answered}
'''


def area_of(relative: Path) -> str:
    parts = relative.parts
    if parts[:2] == BLOB_DIR.parts:
        return "blobs"
    if len(parts) >= 4 and parts[:2] == (".orchestrator", "runs"):
        name = parts[3]
        if name == "state.json":
            return "state"
        if name in ("events.ndjson", "phases", "agents"):
            return "evidence"
        return "history"
    if relative.name.endswith("-state.json"):
        return "state"
    return "other"


def measure_tree(root: Path) -> dict[str, int]:
    sizes = dict.fromkeys(("state", "history", "evidence", "blobs", "other"), 0)
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            sizes[area_of(path.relative_to(root))] += path.stat().st_size
    return sizes


def run_ours(asks: int, root: Path) -> tuple[dict[str, int], int]:
    """The work directory's bytes by area after the loop completes, and the most the whole
    directory held at any pause sampled (every tenth of the run)."""
    modules = root / "modules"
    modules.mkdir()
    text = SOURCE.replace("@ASKS@", str(asks)).replace("@PREAMBLE@", repr(PREAMBLE))
    (modules / "bench_transcript_flow.py").write_text(text, encoding="utf-8")
    sys.path.insert(0, str(modules))
    workflow = importlib.import_module("bench_transcript_flow").Transcript
    workdir = root / "work"
    workdir.mkdir()
    harness = WorkflowHarness(workflow, workdir)
    outcome = harness.run()
    pauses, peak, every = 0, 0, max(1, asks // 10)
    while outcome.status == "paused":
        pauses += 1
        if pauses % every == 0:
            peak = max(peak, sum(measure_tree(workdir).values()))
        for request in outcome.pending:
            harness.respond(request.request_id, ANSWER)
        outcome = harness.resume()
    expected = {"loop": {"asks": asks, "answer_chars": asks * len(ANSWER)}}
    if outcome.status != "completed" or outcome.outputs != expected or pauses != asks:
        raise SystemExit(f"the workflow did not behave: {outcome.status}, {pauses} pauses")
    sizes = measure_tree(workdir)
    return sizes, max(peak, sum(sizes.values()))


def prompts(asks: int) -> list[str]:
    module = importlib.import_module("bench_transcript_flow")
    return [module.prompt_of(number) for number in range(asks)]


def blobs_alone(texts: list[str], root: Path) -> int:
    folder = root / "blobs-alone"
    store = TextBlobs(FileBlobBackend(folder))
    for text in texts:
        store.put(text, run_id="transcript")
    store.put(ANSWER, run_id="transcript")
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def langgraph_line(asks: int, texts: list[str], root: Path, floor: int) -> str:
    if not langgraph_installed():
        return INSTALL_HINT
    from peers import langgraph_transcript

    try:
        size = langgraph_transcript.measure(asks, texts.__getitem__, ANSWER, root)
    except Exception as exc:  # the peer is reported, never judged
        return f"LangGraph: no figure, its loop failed: {exc}"
    ratio = f"({size / floor:.2f}x the floor)"
    return f"LangGraph + SqliteSaver, its SQLite file:  {mib(size)}  {ratio}"


def mib(size: int) -> str:
    return f"{size / MIB:9.2f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--asks", type=int, default=500, help="asks of the loop (500)")
    args = parser.parse_args(argv)
    if args.asks < 1:
        parser.error("--asks: give a number >= 1")
    root = Path(tempfile.mkdtemp(prefix="transcript-growth-"))
    try:
        sizes, peak = run_ours(args.asks, root)
        texts = prompts(args.asks)
        distinct = len(texts[-1].encode()) + len(ANSWER.encode())
        floor = 2 * distinct + 8 * MIB
        ours = sum(sizes.values())
        print(f"a growing transcript, {args.asks} asks (each prompt the last one + 1 KiB)")
        print(f"  every prompt in full:                  {mib(sum(len(t) for t in texts))}")
        print(f"  distinct text:                         {mib(distinct)}")
        print(f"  floor (2 x distinct + 8 MiB):          {mib(floor)}")
        most = f"(most at a pause {mib(peak)})"
        print(f"ours, the whole work directory:          {mib(ours)}  {most}")
        for area, size in sizes.items():
            print(f"  {area:<8}                               {mib(size)}")
        print(f"the prompts through the text blobs alone: {mib(blobs_alone(texts, root))}")
        print(langgraph_line(args.asks, texts, root, floor))
        verdict = "met" if ours <= floor else "MISSED"
        print(f"target (ours <= floor): {verdict}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
