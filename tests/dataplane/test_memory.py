"""Memory freed after a big sync goes back to the system."""

from __future__ import annotations

import os
import subprocess
import sys

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


HEAPS = """
import ctypes, sys, tempfile, threading
from director.dataplane.memory import one_heap
if sys.argv[1] == "one":
    assert one_heap() is True
def work():  # a thread's allocations, as an API worker's scrape makes them
    keep = [bytearray(4096) for _ in range(2000)]
    del keep
for _ in range(3):
    t = threading.Thread(target=work)
    t.start()
    t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
path = tempfile.mktemp()
out = ctypes.c_void_p(libc.fopen(path.encode(), b"w"))
libc.malloc_info(0, out)
libc.fclose(out)
print(open(path).read().count("<heap nr="))
"""


def test_every_thread_of_the_director_allocates_from_one_heap() -> None:
    """glibc's own count of its heaps (malloc_info) after threads allocated: one with
    ``one_heap``, where by default a thread that found the heap busy kept one of its own
    (what a scrape on an API worker left in a static box's RSS)."""
    counts = {
        how: subprocess.run(
            [sys.executable, "-c", HEAPS, how], capture_output=True, text=True, check=True
        ).stdout.strip()
        for how in ("one", "default")
    }
    assert counts["one"] == "1", counts
    assert int(counts["default"]) >= 2, counts  # the check can tell the two apart
