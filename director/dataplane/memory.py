"""Free heap pages back to the system: what the loop does after its biggest allocations
(the first sync, a full resync) and the metrics adapter after a scrape; and one C heap for
every thread of ``director run`` (``one_heap``)."""

from __future__ import annotations

import ctypes

# Looked up once: each ctypes.CDLL makes classes of its own, which (made after a big sync or
# a scrape, among its garbage) held arenas of the heap they were meant to give back.
_LIBC = ctypes.CDLL(None)
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)
_MALLOPT = getattr(_LIBC, "mallopt", None)
M_ARENA_MAX = -8  # glibc's malloc.h


def give_back_free_memory() -> bool:
    """Return the C heap's free pages to the system (glibc's malloc_trim; elsewhere nothing,
    False). The first sync's lists and plan leave the heap grown with free space between what
    is kept, which free() alone never returns: 4 MB at 10,000 Services."""
    return bool(_MALLOC_TRIM(0)) if _MALLOC_TRIM is not None else False


def one_heap() -> bool:
    """Every thread allocates from one C heap (glibc's ``M_ARENA_MAX`` 1, what
    ``MALLOC_ARENA_MAX=1`` in the role's unit asks for, here whatever started the director;
    elsewhere nothing, False). By default the first thread that finds the heap busy gets an
    arena of its own, which keeps what it once held: an API worker's first scrape left a
    static box of 1,000 services 5.3 MB bigger, 1.5 MB with one heap."""
    return bool(_MALLOPT(M_ARENA_MAX, 1)) if _MALLOPT is not None else False
