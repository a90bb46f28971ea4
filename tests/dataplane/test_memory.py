"""Memory freed after a big sync goes back to the system."""

from __future__ import annotations

import os

from director.dataplane.memory import give_back_free_memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_the_heap_freed_after_a_big_sync_goes_back_to_the_system() -> None:
    """What a first sync leaves free in the C heap (between what it keeps) stays in the
    director's RSS until it is given back: 100 MB of freed blocks, one kept at the top."""
    blocks = [bytes(2000) for _ in range(50_000)]  # each from malloc's heap, not mmap
    kept = blocks[-1]
    del blocks
    before = _rss_mb()
    assert give_back_free_memory() is True
    assert before - _rss_mb() > 50, "the freed 100 MB stayed in the process"
    assert len(kept) == 2000
