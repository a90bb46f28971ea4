"""Network namespaces by ``ip netns`` name: run code, and open sockets, inside one."""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def enter_netns(netns: str) -> None:
    """Move the calling thread into network namespace ``netns`` (by ``ip netns`` name)."""
    with open(f"/run/netns/{netns}") as handle:
        if _libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns({netns}): {os.strerror(code)}")


def in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """Run ``fn`` in network namespace ``netns`` (by ``ip netns`` name) on a helper thread.

    Sockets created there stay in that namespace after the thread ends.
    """
    if netns is None:
        return fn()
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            enter_netns(netns)
            result.append(fn())
        except BaseException as exc:  # handed back to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def write_sysctls(netns: str | None, values: dict[str, str]) -> dict[str, str]:
    """Set kernel parameters (``net.ipv4.vs.sloppy_tcp``) as seen from ``netns``; returns
    the ones that could not be set, with why (the module not loaded, no permission)."""
    from pathlib import Path

    failed: dict[str, str] = {}

    def write() -> None:
        for name, value in values.items():
            path = Path("/proc/sys") / name.replace(".", "/")
            try:
                if path.read_text().strip() != value:
                    path.write_text(value)
            except OSError as exc:
                failed[name] = exc.strerror or str(exc)

    in_netns(netns, write)
    return failed


def read_sysctls(netns: str | None, names: list[str]) -> dict[str, str]:
    """Kernel parameters as seen from ``netns`` (a missing one reads as ""). Raises OSError
    when one exists and cannot be read."""
    from pathlib import Path

    def read() -> dict[str, str]:
        found: dict[str, str] = {}
        for name in names:
            try:
                found[name] = (Path("/proc/sys") / name.replace(".", "/")).read_text().strip()
            except FileNotFoundError:
                found[name] = ""
        return found

    return in_netns(netns, read)


def _per_cpu(name: str) -> dict[str, int]:
    """A ``/proc/net/stat`` file of this thread's namespace (a header, then one row of hex
    figures per CPU), summed over the CPUs; ``entries`` is a table's size, the same in every
    row, so it is taken as it is. Empty when the file is absent (its module not loaded)."""
    from pathlib import Path

    try:
        lines = (Path("/proc/thread-self/net/stat") / name).read_text().splitlines()
    except FileNotFoundError:
        return {}
    names = lines[0].split() if lines else []
    totals = dict.fromkeys(names, 0)
    for row in lines[1:]:
        for key, figure in zip(names, row.split(), strict=False):
            value = int(figure, 16)
            totals[key] = value if key == "entries" else totals[key] + value
    return totals


def conntrack_stats(netns: str | None) -> dict[str, int]:
    """netfilter's connection-tracking counters as seen from ``netns``, summed over the
    CPUs (``/proc/net/stat/nf_conntrack``; ``entries`` is the table's size), and ``max``,
    the most it may hold (``net.netfilter.nf_conntrack_max``: past it new connections are
    dropped). Empty when conntrack is not loaded there. Raises OSError when the file cannot
    be read."""
    from pathlib import Path

    def read() -> dict[str, int]:
        totals = _per_cpu("nf_conntrack")
        if totals:
            with contextlib.suppress(OSError, ValueError):
                totals["max"] = int(Path("/proc/sys/net/netfilter/nf_conntrack_max").read_text())
        return totals

    return in_netns(netns, read)


def synproxy_stats(netns: str | None) -> dict[str, int]:
    """synproxy's counters as seen from ``netns``, summed over the CPUs
    (``/proc/net/stat/synproxy``: ``syn_received``, SYNs answered with a cookie;
    ``cookie_valid``, handshakes a client completed; ``cookie_invalid``, ACKs whose cookie
    was wrong or stale; ``cookie_retrans``, ``conn_reopened``). Empty when synproxy is not
    loaded there. Raises OSError when the file cannot be read."""

    def read() -> dict[str, int]:
        totals = _per_cpu("synproxy")
        totals.pop("entries", None)  # always 0: synproxy keeps no table of its own
        return totals

    return in_netns(netns, read)
