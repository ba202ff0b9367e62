"""Texts stored once by content (``orchestrator.storage.blobs``), on files: one blob per
distinct text, a growing transcript kept as links plus tails within the issue's floor, a
changed blob refused naming its file, and a new process reading the references back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator._errors import HistoryDamagedError
from orchestrator.storage.blobs import (
    BLOB_DIR,
    MAX_DEPTH,
    FileBlobBackend,
    TextBlobs,
    is_ref,
)

KIB = 1024
MIB = 1024 * KIB


def blob_files(workdir: Path) -> list[Path]:
    return sorted(p for p in (workdir / BLOB_DIR).glob("??/*") if p.is_file())


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def transcript(asks: int) -> list[str]:
    """The prompts of an agent loop that resends its transcript: each the last plus 1 KiB."""
    text = "System: you are a careful reviewer of this repository. " + "s" * 4000
    prompts = []
    for number in range(asks):
        tail = f"\n[ask {number:04d}] "
        text += tail + "t" * (KIB - len(tail))
        prompts.append(text)
    return prompts


def test_a_text_stored_twice_writes_one_blob(tmp_path: Path) -> None:
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    text = "the same long answer. " * 400
    first = blobs.put(text, run_id="run-a")
    second = blobs.put(text, run_id="run-b")
    third = TextBlobs(FileBlobBackend(tmp_path)).put(text)
    assert first == second == third and is_ref(first)
    files = blob_files(tmp_path)
    assert [p.name for p in files] == [first.removeprefix("sha256:")]
    assert blobs.get(first) == text


def test_short_texts_are_not_worth_a_blob(tmp_path: Path) -> None:
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    assert not blobs.worth_storing("x" * 4095)
    assert blobs.worth_storing("x" * 4096)
    assert blobs.worth_storing("é" * 2048)  # 4,096 bytes of UTF-8


def test_a_growing_transcript_of_500_asks_stays_within_the_floor(tmp_path: Path) -> None:
    prompts = transcript(500)
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    refs = [blobs.put(prompt, run_id="loop-run") for prompt in prompts]
    distinct = len(prompts[-1].encode())  # every prompt is a prefix of the last
    stored = tree_bytes(tmp_path)
    every_prompt_in_full = sum(len(p) for p in prompts)
    assert every_prompt_in_full > 100 * MIB
    assert stored <= 2 * distinct + 8 * MIB, (stored, distinct)
    # Links, not copies: far below a full copy every 16 asks (about 8 MiB here).
    assert stored < 4 * MIB
    reader = TextBlobs(FileBlobBackend(tmp_path))
    for number in (0, 1, 2, 3, 127, 128, 255, 256, 311, 498, 499):
        assert reader.get(refs[number]) == prompts[number]
    depths = []
    for path in blob_files(tmp_path):
        head = path.read_bytes().split(b"\n", 1)[0].split(b" ")
        depths.append(int(head[3]))
    assert max(depths) <= 9 < MAX_DEPTH  # log2(500): skip-delta links


def test_the_index_survives_a_new_store_object(tmp_path: Path) -> None:
    prompts = transcript(40)
    first = TextBlobs(FileBlobBackend(tmp_path))
    for prompt in prompts[:20]:
        first.put(prompt, run_id="loop-run")
    before = tree_bytes(tmp_path / BLOB_DIR)
    later = TextBlobs(FileBlobBackend(tmp_path))  # as a resumed process would
    ref = later.put(prompts[20], run_id="loop-run")
    grown = tree_bytes(tmp_path / BLOB_DIR) - before
    assert grown < len(prompts[20]) // 2  # a link and a tail, not the text again
    assert later.get(ref) == prompts[20]


@pytest.mark.parametrize("where", ["tail", "base"])
def test_a_changed_blob_is_refused_naming_it(tmp_path: Path, where: str) -> None:
    prompts = transcript(3)
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    refs = [blobs.put(prompt, run_id="loop-run") for prompt in prompts]
    target = refs[1] if where == "tail" else refs[0]
    path = tmp_path / BLOB_DIR / target[7:9] / target[7:]
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    with pytest.raises(HistoryDamagedError) as caught:
        TextBlobs(FileBlobBackend(tmp_path)).get(refs[1])
    assert str(path) in str(caught.value)
    assert "digest" in str(caught.value)


def test_a_missing_blob_is_named(tmp_path: Path) -> None:
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    ref = "sha256:" + "ab" * 32
    with pytest.raises(HistoryDamagedError, match="missing"):
        blobs.get(ref)


def test_a_new_process_reads_the_references(tmp_path: Path) -> None:
    prompts = transcript(30)
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    refs = [blobs.put(prompt, run_id="loop-run") for prompt in prompts]
    script = (
        "import sys, hashlib\n"
        "from pathlib import Path\n"
        "from orchestrator.storage.blobs import TextBlobs, FileBlobBackend\n"
        "blobs = TextBlobs(FileBlobBackend(Path(sys.argv[1])))\n"
        "for ref in sys.argv[2:]:\n"
        "    print(hashlib.sha256(blobs.get(ref).encode()).hexdigest(), len(blobs.get(ref)))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), refs[0], refs[17], refs[29]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    for line, number in zip(shown, (0, 17, 29), strict=False):
        digest, length = line.split()
        assert f"sha256:{digest}" == refs[number]
        assert int(length) == len(prompts[number])


def test_a_text_with_a_lone_surrogate_comes_back_as_it_was(tmp_path: Path) -> None:
    # JSON allows "\ud800" in a prompt; the blob keeps it and gives it back unchanged.
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    text = "before \ud800 after " * 400
    grown = text + "\udfff and more " * 100
    assert blobs.get(blobs.put(text, run_id="r")) == text
    assert blobs.get(blobs.put(grown, run_id="r")) == grown


def test_links_name_every_blob_a_text_needs(tmp_path: Path) -> None:
    prompts = transcript(12)
    blobs = TextBlobs(FileBlobBackend(tmp_path))
    refs = [blobs.put(prompt, run_id="loop-run") for prompt in prompts]
    # Text 11 (0b1011) links to 10, 10 to 8, 8 to 0 (skip-deltas).
    assert blobs.links(refs[11]) == [refs[n][7:] for n in (11, 10, 8, 0)]
    assert blobs.links(refs[0]) == [refs[0][7:]]
    for path in blob_files(tmp_path):
        if path.name not in blobs.links(refs[11]):
            path.unlink()
    assert blobs.get(refs[11]) == prompts[11]  # what links names is all it needs
