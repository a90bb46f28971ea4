"""What the kernel adapter's reads leave behind in the process: shared by `make bench` (the
figure) and the conformance suite (each read asserted whole, read after read)."""

from __future__ import annotations

import gc
from pathlib import Path

from director.core.services import Table
from director.dataplane.kernel import KernelIpvs
from director.engine.reconcile import Reconciler


def settled_kib() -> int:
    """Resident KiB once the collector and the C heap have given back what they can."""
    import ctypes

    gc.collect()
    getattr(ctypes.CDLL(None), "malloc_trim", lambda _: 0)(0)
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0])


def read_growth(reconciler: Reconciler, ipvs: KernelIpvs, table: Table) -> dict[str, int]:
    """What the reads leave behind: the process's growth after two periodic resyncs, two
    scrapes' counter reads (in columns) and two reads as objects (the API's). A cache of
    decoded replies, filled among a read's garbage, once held +19.5 MiB after a resync and
    +44 MiB after a scrape at 10,000 services; the figures are the allocator's too, so they
    are measured here, not bounded in a test (issue 34, item 10)."""
    before = settled_kib()
    for _ in range(2):
        assert reconciler.full_sync(table, keep_plan=False).result.requested == 0
    resynced = settled_kib() - before
    for _ in range(2):
        del_me = ipvs.read_counters()
        del del_me
    scraped = settled_kib() - before
    for _ in range(2):
        assert len(ipvs.read(stats=True).dest_state) == sum(
            len(vs.real_servers) for vs in table.values()
        )
    read = settled_kib() - before
    return {"after_resyncs": resynced, "after_scrapes": scraped, "after_object_reads": read}
