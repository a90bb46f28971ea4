"""The kernel's IPVS modules: the schedulers on offer, loaded, available as modules or built
in (and never what is not a scheduler), read as far as the box lets the director read."""

from __future__ import annotations

import os
from pathlib import Path

from director.dataplane.modules import NOT_SCHEDULERS, offered_schedulers


def test_schedulers_are_what_is_loaded_when_the_module_tree_cannot_be_read(tmp_path: Path) -> None:
    """The role's unit has ProtectKernelModules=yes: /lib/modules is out of reach there, and
    the director must still start, offering the schedulers loaded at boot (found booting the
    role's image: it died on EACCES)."""
    (tmp_path / os.uname().release).write_text("not a folder: every read of it fails")
    loaded = {p.name[len("ip_vs_") :] for p in Path("/sys/module").glob("ip_vs_*")}
    assert offered_schedulers(tmp_path) == frozenset(loaded) - NOT_SCHEDULERS


def test_schedulers_are_found_as_modules_and_built_in_and_helpers_are_not_schedulers(
    tmp_path: Path,
) -> None:
    release = tmp_path / os.uname().release
    ipvs = release / "kernel/net/netfilter/ipvs"
    ipvs.mkdir(parents=True)
    for name in ("ip_vs_mh.ko.xz", "ip_vs_twos.ko", "ip_vs_ftp.ko.zst", "ip_vs.ko"):
        (ipvs / name).write_text("")
    (release / "modules.builtin").write_text(
        "kernel/net/netfilter/ipvs/ip_vs_rr.ko\nkernel/net/netfilter/ipvs/ip_vs_pe_sip.ko\n"
    )
    offered = offered_schedulers(tmp_path)
    assert {"mh", "twos", "rr"} <= offered
    assert offered.isdisjoint(NOT_SCHEDULERS) and "" not in offered
