"""``storage.beneath``'s directory making: made once, found after, never through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator._errors import UnsafePathError
from orchestrator.storage import beneath


@pytest.fixture
def guarded(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    beneath.guard(workdir)
    return workdir


def test_make_directory_tells_whether_it_made_the_directory(guarded: Path) -> None:
    target = guarded / "runs"
    assert beneath.make_directory(target) is True
    assert target.is_dir() and not target.is_symlink()
    assert beneath.make_directory(target) is False  # there already: found, not made
    assert beneath.make_directory(target / "inner") is True


def test_make_directory_needs_its_parent(guarded: Path) -> None:
    with pytest.raises(FileNotFoundError):
        beneath.make_directory(guarded / "missing" / "inner")
    assert not (guarded / "missing").exists()


@pytest.mark.parametrize("planted", ["link-to-dir", "dangling-link", "file"])
def test_make_directory_refuses_what_is_planted_in_its_place(
    guarded: Path, tmp_path: Path, planted: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = guarded / "phases"
    if planted == "link-to-dir":
        target.symlink_to(outside)
    elif planted == "dangling-link":
        target.symlink_to(tmp_path / "nowhere")
    else:
        target.write_bytes(b"a file where a directory belongs\n")
    with pytest.raises(UnsafePathError, match="phases"):
        beneath.make_directory(target)
    assert os.listdir(outside) == []
    assert not (tmp_path / "nowhere").exists()


def test_make_directory_walks_no_link_on_the_way(guarded: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (guarded / "runs").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="runs"):
        beneath.make_directory(guarded / "runs" / "run-1")
    assert os.listdir(outside) == []
