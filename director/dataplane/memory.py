"""Free heap pages back to the system: what the loop does after its biggest allocations
(the first sync, a full resync) and the metrics adapter after a scrape."""

from __future__ import annotations

import ctypes

# Looked up once: each ctypes.CDLL makes classes of its own, which (made after a big sync or
# a scrape, among its garbage) held arenas of the heap they were meant to give back.
_MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)


def give_back_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc's malloc_trim; elsewhere nothing,
    False). The first sync's lists and plan leave the heap grown with free space between what
    is kept, which free() alone never returns: 4 MB at 10,000 Services."""
    return bool(_MALLOC_TRIM(0)) if _MALLOC_TRIM is not None else False
