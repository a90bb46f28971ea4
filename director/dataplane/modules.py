"""The kernel's IPVS modules: ``ip_vs`` and a scheduler's module loaded when first needed,
the schedulers on offer, and the IPVS generic netlink family's id."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
from pathlib import Path

from director.dataplane.interface import IpvsUnavailable
from director.dataplane.netlink import (
    GENL_ID_CTRL,
    I32,
    NETLINK_GENERIC,
    NLMSG_ERROR,
    error_text,
    family_id,
    family_request,
    split_messages,
)

NOT_SCHEDULERS = frozenset({"ftp", "pe_sip"})  # ip_vs_* modules that are not schedulers

UNAVAILABLE = (
    "this kernel has no IPVS support (the ip_vs module is not loaded and could not be "
    "loaded), so director cannot read or program virtual services on this host"
)


# --- kernel modules ---------------------------------------------------------------------
def load_module(module: str) -> str | None:
    """Load a module; None on success, else why not."""
    if Path(f"/sys/module/{module}").exists():
        return None
    try:
        done = subprocess.run(
            ["modprobe", module], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.strip() or f"modprobe {module} exited {done.returncode}"
    return None


def offered_schedulers(modules: Path = Path("/lib/modules")) -> frozenset[str]:
    """Schedulers the running kernel has: loaded, built in, or available as modules.

    Under systemd's ProtectKernelModules= (the role's unit) the module tree cannot be read
    and nothing can be loaded: the schedulers loaded at boot are then the ones on offer."""
    names = {p.name[len("ip_vs_") :] for p in Path("/sys/module").glob("ip_vs_*")}
    release = os.uname().release
    moddir = modules / release / "kernel/net/netfilter/ipvs"
    with contextlib.suppress(OSError):  # EACCES in the hardened unit
        names.update(p.name.split(".", 1)[0][len("ip_vs_") :] for p in moddir.glob("ip_vs_*.ko*"))
    with contextlib.suppress(OSError):
        for line in (modules / release / "modules.builtin").read_text().splitlines():
            name = line.rsplit("/", 1)[-1]
            if name.startswith("ip_vs_"):
                names.add(name.split(".", 1)[0][len("ip_vs_") :])
    return frozenset(names - NOT_SCHEDULERS)


def resolve_family() -> int:
    """The IPVS generic netlink family id, loading ip_vs if needed."""
    for attempt in range(2):
        try:
            return _ask_family()
        except OSError as exc:
            if exc.errno != errno.ENOENT or attempt:
                raise IpvsUnavailable(f"{UNAVAILABLE} ({exc})") from None
        if load_module("ip_vs") is not None:
            break
    raise IpvsUnavailable(UNAVAILABLE)


def _ask_family() -> int:
    """One question to the generic netlink controller, on a socket of its own (no library:
    pyroute2 alone would add 10 MB to the process). OSError: the kernel's errno (ENOENT:
    no such family, ip_vs not loaded)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC) as sock:
        sock.bind((0, 0))
        sock.settimeout(10)
        sock.send(family_request(1))
        while True:
            data = sock.recv(65536)
            for kind, flags, seq, start, end in split_messages(data):
                if seq != 1:
                    continue
                if kind == NLMSG_ERROR:
                    code = -I32.unpack_from(data, start)[0]
                    raise OSError(code, error_text(data, flags, start, end))
                if kind == GENL_ID_CTRL:
                    return family_id(data, start, end)
