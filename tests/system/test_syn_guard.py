"""The SYN guard on a real kernel (the lab VM): a box on its own answers the SYNs of its nat
and full-NAT services with cookies (nftables synproxy), so a flood of spoofed SYNs fills
neither IPVS's connection table nor the real servers' queues, while clients that complete
the handshake are served (full NAT from the SNAT address). A service that opts out is
flooded as before, for comparison. A flushed ruleset brings the guard back within a
resync. A client over its rate on a guarded service is dropped before the guard answers
it, another client is not. Counts, never timings: the flood's figures are ``make bench-flood``'s."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.kernel

WEB, OPEN, FULL, LIMITED = "198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"
FLOOD = 3000  # spoofed SYNs a flood sends (bounded)


def held(ns: object, vip: str) -> int:
    """Connections IPVS holds for ``vip`` (any state)."""
    out = ns.exec(["ipvsadm", "-Lnc"])  # type: ignore[attr-defined]
    return sum(1 for line in out.splitlines() if f" {vip}:80 " in f"{line} ")


def flood(ns: object, vip: str, packets: int = FLOOD) -> int:
    """``packets`` spoofed SYNs from 198.18.0.0/15 to ``vip``:80, from ``ns``: how many
    were sent."""
    done = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            ns.name,  # type: ignore[attr-defined]
            sys.executable,
            "-m",
            "lab.flood",
            "--vip",
            vip,
            "--port",
            "80",
            "--packets",
            str(packets),
            "--seconds",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(json.loads(done.stdout)["sent"])


def scraped(runtime: object) -> dict[str, float]:
    from director.adapters.metrics.promtext import generate_latest

    text = generate_latest(runtime.metrics.registry).decode()  # type: ignore[attr-defined]
    return {
        f"{sample.name}{sample.labels.get('limit', '')}": sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith(("director_syn_guard", "director_limit"))
    }


def test_a_box_on_its_own_answers_a_flood_with_cookies_and_serves_its_clients(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from director.daemon.runtime import Runtime
    from director.dataplane.kernel import KernelIpvs
    from director.dataplane.netns import synproxy_stats
    from director.engine.reconcile import Reconciler
    from director.schema.config import parse_config
    from lab.netns import (
        BACKEND_NET4,
        CLIENT_NET4,
        NAT_PORT,
        Connection,
        ask_tcp,
        build_lab,
        connect_attempts,
        run,
        start_servers,
    )
    from lab.wait import eventually

    run(["modprobe", "-a", "nft_synproxy", "nf_conntrack"], check=False)
    lab = build_lab(prefix="sg", backends=2)
    snat = f"{BACKEND_NET4}.1"
    servers = [f"{be.ipv4}:{NAT_PORT}" for be in lab.backends]
    text = f"""
ownership: {{networks: [198.51.100.0/24]}}
services:
  - {{name: web, address: {WEB}, port: 80, scheduler: rr, real_servers: {servers}}}
  - {{name: open, address: {OPEN}, port: 80, scheduler: rr, syn_guard: false,
     real_servers: {servers}}}
  - {{name: full, address: {FULL}, port: 80, scheduler: rr, forwarding: fullnat,
     real_servers: {servers}}}
  - {{name: limited, address: {LIMITED}, port: 80, scheduler: rr, client_rate: 5,
     real_servers: {servers}}}
snat: {{addresses: [{snat}]}}
"""
    try:
        lab.lvs.ip(
            *(f"addr add {vip}/32 dev vips" for vip in (WEB, OPEN, FULL, LIMITED)),
            # the box's answers to the flood go back to where it came from (and die there)
            f"route add 198.18.0.0/15 via {CLIENT_NET4}.2",
        )
        start_servers(lab, tcp_ports=(NAT_PORT,), udp_ports=())
        ipvs = KernelIpvs(netns=lab.lvs.name)
        runtime = Runtime(parse_config(text, "guard.yaml"), ipvs, metrics=True).start()
        try:
            assert runtime.wait_ready(120)
            guarded = eventually(
                lambda: (
                    (s := lab.lvs.exec(["nft", "list", "set", "inet", "director", "guard4"]))
                    and f"{WEB} . tcp . 80" in s
                    and s
                ),
                timeout=60,
                what="the guard in force",
            )
            assert f"{FULL} . tcp . 80" in guarded and f"{OPEN} . tcp . 80" not in guarded
            sysctls = lab.lvs.exec(
                ["sysctl", "-n", "net.ipv4.vs.conntrack", "net.netfilter.nf_conntrack_tcp_loose"]
            )
            assert sysctls.split() == ["1", "0"]

            # Clients that complete the handshake are served, through synproxy's cookies;
            # full NAT's real servers see the box's SNAT address.
            before = synproxy_stats(lab.lvs.name)
            answers = {ask_tcp(lab.client, WEB, 80) for _ in range(6)}
            kept = Connection(lab.client, FULL, 80)
            assert answers == {"be1", "be2"} and kept.ask() in ("be1", "be2")
            grown = synproxy_stats(lab.lvs.name)
            assert grown["cookie_valid"] - before["cookie_valid"] >= 7, grown
            peers = " ".join(
                be.ns.exec(["ss", "-Htn", "state", "established", f"( sport = :{NAT_PORT} )"])
                for be in lab.backends
            )
            # the peer column, as IPv4 or IPv4-mapped (the servers listen on both families)
            assert f" {snat}:" in peers or f"[::ffff:{snat}]:" in peers, peers

            # A client over its rate (5 new connections a second, counted before the guard
            # answers): the burst gets through and the rest is dropped, not reset, and
            # counted; another address is not slowed, and is served through IPVS.
            greedy, took = connect_attempts(
                lab.client, LIMITED, 80, lab.client_sources4[1], 30, wait=0.9
            )
            assert 5 <= greedy <= 5 + 5 * took + 1, (greedy, took)
            polite = connect_attempts(lab.client, LIMITED, 80, lab.client_sources4[2], 5, wait=0.9)
            assert polite[0] == 5
            assert ask_tcp(lab.client, LIMITED, 80, lab.client_sources4[3]) in ("be1", "be2")
            assert scraped(runtime)["director_limit_dropped_attempts_totalclient"] >= 30 - greedy

            # A flood: the guarded service's IPVS table and real servers never see it; the
            # one that opted out holds a connection for each spoofed SYN.
            web_before = held(lab.lvs, WEB)  # the handshakes above, closing
            sent = flood(lab.client, WEB)
            sent_open = flood(lab.client, OPEN)
            after = synproxy_stats(lab.lvs.name)
            answered = after["syn_received"] - grown["syn_received"]
            web_held, open_held = held(lab.lvs, WEB), held(lab.lvs, OPEN)
            with capsys.disabled():
                print(
                    f"\nsyn guard: {sent} spoofed SYNs to the guarded VIP, {answered} answered "
                    f"with cookies, IPVS holds {web_held} of its connections; {sent_open} to "
                    f"the one that opted out, IPVS holds {open_held}"
                )
            # (a loaded machine may drop some of a flood before either service sees it)
            assert sent == FLOOD and sent_open == FLOOD
            assert answered >= FLOOD * 0.5
            assert web_held <= web_before + 2
            assert open_held >= FLOOD * 0.5
            assert ask_tcp(lab.client, WEB, 80) in ("be1", "be2")
            assert kept.ask() in ("be1", "be2")  # the long-lived connection carries on
            figures = scraped(runtime)
            assert figures["director_syn_guard_services"] == 3
            assert figures["director_syn_guard_cookies_sent_total"] >= answered

            # Someone flushes the ruleset: the guard is back within a resync.
            lab.lvs.exec(["nft", "flush", "ruleset"])
            eventually(
                lambda: (
                    f"{WEB} . tcp . 80"
                    in lab.lvs.exec(
                        ["nft", "list", "set", "inet", "director", "guard4"], check=False
                    )
                ),
                timeout=60,
                what="the guard put back",
            )
            web_before = held(lab.lvs, WEB)
            flood(lab.client, WEB, 1000)
            assert held(lab.lvs, WEB) <= web_before + 2
            assert ask_tcp(lab.client, WEB, 80) in ("be1", "be2")
            kept.close()
        finally:
            runtime.stop()
            Reconciler(ipvs, runtime.controller.settings.ownership).full_sync({})
            lab.lvs.exec(["nft", "delete", "table", "inet", "director"], check=False)
            ipvs.close()
    finally:
        lab.close()
