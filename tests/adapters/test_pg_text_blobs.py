"""Texts stored once on PostgreSQL (migration 0004, ``text_blobs``): one row per distinct
text, a growing transcript as links plus tails, a changed row refused naming it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator._errors import HistoryDamagedError
from orchestrator.storage.blobs import TextBlobs

KIB = 1024
MIB = 1024 * KIB


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    backends: list[Any] = []
    yield backends
    for backend in backends:
        backend.close()


def _blobs(dsn: str, opened: list[Any]) -> TextBlobs:
    from orchestrator.adapters.postgres.text_blobs import PostgresBlobBackend

    backend = PostgresBlobBackend(dsn)
    opened.append(backend)
    return TextBlobs(backend)


def _rows(dsn: str) -> tuple[int, int]:
    from orchestrator.adapters.postgres.connection import connect

    with connect(dsn) as conn:
        row = conn.execute("select count(*), coalesce(sum(length(body)), 0) from text_blobs")
        count, size = row.fetchone()
    return int(count), int(size)


def test_pg_text_blobs_once_growing_and_checked(pg_dsn: str, opened: list[Any]) -> None:
    from orchestrator.adapters.postgres.connection import connect

    before_count, before_size = _rows(pg_dsn)
    blobs = _blobs(pg_dsn, opened)
    answer = "one long answer, stored once. " * 300
    assert blobs.put(answer, run_id="pg-run-a") == blobs.put(answer, run_id="pg-run-b")
    assert _rows(pg_dsn)[0] == before_count + 1

    text = "System: review the repository. " + "s" * 4000
    prompts, refs = [], []
    for number in range(200):
        tail = f"\n[ask {number:04d}] "
        text += tail + "t" * (KIB - len(tail))
        prompts.append(text)
        refs.append(blobs.put(text, run_id="pg-run-loop"))
    count, size = _rows(pg_dsn)
    assert count == before_count + 1 + 200
    stored = size - before_size - len(answer)
    assert stored <= 2 * len(prompts[-1]) + 8 * MIB
    assert stored < 2 * MIB  # links and tails, not 200 copies (about 20 MiB)

    reader = _blobs(pg_dsn, opened)  # as another process would
    for number in (0, 63, 64, 199):
        assert reader.get(refs[number]) == prompts[number]

    target = refs[64][len("sha256:") :]
    with connect(pg_dsn) as conn:
        conn.execute("update text_blobs set body = body || 'x'::bytea where digest = %s", (target,))
        conn.commit()
    with pytest.raises(HistoryDamagedError) as caught:
        _blobs(pg_dsn, opened).get(refs[100])
    assert f"text_blobs row {target}" in str(caught.value)
