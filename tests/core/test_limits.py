"""Limits per Service: new TCP connections a second from one client address and from all
clients (the box's nftables table), connections per real server (IPVS's upper threshold);
set by annotation, pool and static service, refused with a reason where they cannot be,
kept by the loop like the rest of its table, and shown by the API and the metrics. Real
nftables dropping a client over its rate: ``tests/dataplane/test_nft.py``; a real kernel
with IPVS and the SYN guard: ``tests/system/test_syn_guard.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics.promtext import generate_latest
from director.core.firewall import FakeFirewall, SynGuard, render_nft
from director.core.model import IpProtocol as Protocol, RateLimit, ServiceKey
from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import ConfigError, load_config, parse_config
from director.web.app import create_app
from lab.kubeapi import FakeApiServer, endpoint_slice, service
from lab.netns import Netns, run
from lab.wait import eventually

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)
DNS = ServiceKey.inet(Protocol.UDP, "198.51.100.1", 53)
CHAIN = "svc4_tcp_198_51_100_1_80"


def _rules(text: str, chain: str = CHAIN) -> list[str]:
    return [
        line for line in text.splitlines() if line.startswith(f"add rule inet director {chain} ")
    ]


def test_a_clients_syns_over_its_rate_then_the_services_are_dropped_and_counted() -> None:
    text = render_nft({WEB: ("10.0.0.0/8",)}, limits={WEB: RateLimit(client=20, service=500)})
    rules = _rules(text)
    # the source filter first (an outside source is the filter's), then the limits
    assert "saddr != @src4_" in rules[0]
    assert rules[1].endswith(
        "tcp flags & (fin | syn | rst | ack) == syn update @client4_tcp_198_51_100_1_80_20 { ip "
        "saddr limit rate over 20/second burst 20 packets } counter name "
        '"over4_tcp_198_51_100_1_80_client" drop'
    )
    assert rules[2].endswith(
        'tcp flags & (fin | syn | rst | ack) == syn limit name "rate4_tcp_198_51_100_1_80_500" '
        'counter name "over4_tcp_198_51_100_1_80_service" drop'
    )
    assert rules[3].endswith(f"{CHAIN} accept")
    assert "add limit inet director rate4_tcp_198_51_100_1_80_500 { rate over 500/second " \
        "burst 500 packets ; }" in text  # fmt: skip
    # UDP has no handshake to count; a service closed to every source has nothing to limit
    assert "udp" not in render_nft({}, limits={DNS: RateLimit(client=5)}).split("services6")[-1]
    assert "client4" not in render_nft({WEB: ()}, limits={WEB: RateLimit(client=5)})


def test_a_guarded_services_rate_counts_the_handshakes_synproxy_completes() -> None:
    """A spoofed flood must not use up the real clients' rate: for a guarded service the
    service's rate counts the cookie ACKs (which a client sends again until one passes); the
    client's rate still counts SYNs, before synproxy answers them."""
    text = render_nft(
        {}, guard=frozenset({WEB}), syn_guard=SynGuard(), limits={WEB: RateLimit(3, 100)}
    )
    client, rate, _ = _rules(text)
    assert "== syn update @client4_" in client
    assert "ct state invalid,untracked tcp flags & (fin | syn | rst | ack) == ack limit " in rate


def test_a_changed_rate_is_a_new_meter_and_the_counters_keep_counting() -> None:
    first = render_nft({}, limits={WEB: RateLimit(client=20)})
    names = [
        line.split()[4]
        for line in first.splitlines()
        if line.split()[:2] in (["add", "set"], ["add", "counter"], ["add", "chain"])
    ]
    second = render_nft({}, names, limits={WEB: RateLimit(client=40)})
    assert "delete set inet director client4_tcp_198_51_100_1_80_20" in second
    assert "delete counter" not in second
    gone = render_nft({}, [*names, "rate4_tcp_198_51_100_1_80_9"])
    assert gone.splitlines()[-5:] == [
        f"delete chain inet director {CHAIN}",
        "delete set inet director client4_tcp_198_51_100_1_80_20",
        "delete counter inet director over4_tcp_198_51_100_1_80_client",
        "delete counter inet director over4_tcp_198_51_100_1_80_service",
        "delete limit inet director rate4_tcp_198_51_100_1_80_9",
    ]


def test_nft_takes_the_limits_beside_the_filter_the_guard_and_full_nat(tmp_path: Path) -> None:
    import os

    ns = Netns(f"lim{os.getpid()}")
    try:
        script = render_nft(
            {WEB: ("10.0.0.0/8",)},
            snat=frozenset({WEB}),
            snat_to={WEB.family: ("192.0.2.1",)},
            guard=frozenset({WEB}),
            syn_guard=SynGuard(),
            limits={WEB: RateLimit(20, 500)},
        )
        run(["ip", "netns", "exec", ns.name, "nft", "-f", "-"], stdin=script)  # raises if refused
        held = ns.exec(["nft", "list", "table", "inet", "director"])
        assert "limit rate over 20/second burst 20 packets" in held
        assert "rate over 500/second burst 500 packets" in held
    finally:
        ns.close()


def test_annotations_limit_a_service_and_the_api_and_metrics_say_what_was_dropped(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """client-rate, service-rate and max-connections on a Service: the rates in the box's
    table (TCP ports only), the threshold on each real server, both in the API with what
    the rates dropped, and a metric per limit; a bad value and a rate on a UDP-only Service
    are refused with a reason; a flush brings the limits back; removing the annotations
    removes them."""
    text = f"""
pools:
  - {{name: p, addresses: [198.51.100.0-198.51.100.7], service_rate: 1000}}
kubernetes: {{kubeconfig: {api.kubeconfig(tmp_path / "kc")}, identity: a, lease_seconds: 2}}
"""
    firewall, ipvs = FakeFirewall(), FakeIpvs()
    runtime = Runtime(parse_config(text, "limits.yaml"), ipvs, firewall=firewall, metrics=True)
    annotations = {
        "lvs-director.io/client-rate": "20",
        "lvs-director.io/max-connections": "300",
        "lvs-director.io/backends": "pod",
    }
    ports = [("http", "TCP", 80), ("dns", "UDP", 53)]
    with runtime.start():
        assert runtime.wait_ready(20)
        api.create("services", service("web", ports, annotations=annotations))
        api.create(
            "endpointslices", endpoint_slice("web", [("10.1.0.5", None, True, False)], ports)
        )
        tcp = ServiceKey.inet(Protocol.TCP, "198.51.100.0", 80)
        udp = ServiceKey.inet(Protocol.UDP, "198.51.100.0", 53)
        # the pool's service rate, the annotation's client rate; not the UDP port
        eventually(lambda: firewall.limits == {tcp: RateLimit(20, 1000)}, what="the limits")
        eventually(lambda: tcp in ipvs.read().services, what="served")
        dests = ipvs.read().services[tcp].real_servers.values()
        assert dests and {d.upper_threshold for d in dests} == {300}
        assert {d.upper_threshold for d in ipvs.read().services[udp].real_servers.values()} == {300}
        firewall.over[tcp] = (7, 2)
        client = create_app(runtime.controller.door(), "t").test_client()
        auth = {"Authorization": "Bearer t"}

        def listed() -> dict[str, dict[str, object]]:
            items = client.get("/api/v1/services", headers=auth).get_json()["items"]
            return {item["service"]: item for item in items}

        shown = eventually(lambda: listed().get("tcp 198.51.100.0:80", {}).get("limits"))
        assert shown == {
            "client_rate": 20,
            "service_rate": 1000,
            "dropped_over_client_rate": 7,
            "dropped_over_service_rate": 2,
        }
        assert "limits" not in listed()["udp 198.51.100.0:53"]
        dests_shown = listed()["tcp 198.51.100.0:80"]["real_servers"]
        assert {rs["max_connections"] for rs in dests_shown} == {300}  # type: ignore[attr-defined]
        assert runtime.metrics is not None
        scrape = generate_latest(runtime.metrics.registry).decode()
        over = {
            sample.labels["limit"]: sample.value
            for family in text_string_to_metric_families(scrape)
            if family.name == "director_limit_dropped_attempts"
            for sample in family.samples
            if sample.labels["local_address"] == "198.51.100.0"
            and sample.labels["service"] == "web"
        }
        assert over == {"client": 7, "service": 2}
        firewall.flush()
        eventually(lambda: firewall.limits == {tcp: RateLimit(20, 1000)}, timeout=15, what="back")
        api.patch(
            "services",
            "web",
            {"metadata": {"annotations": {"lvs-director.io/client-rate": "fast"}}},
        )
        events = eventually(
            lambda: [e for e in api.events_for("web") if "client-rate" in e["message"]],
            what="the bad value said",
        )
        assert "'fast' is not a whole number from 0 to 10000000" in events[0]["message"]
        assert firewall.limits == {tcp: RateLimit(20, 1000)}, "the last valid value kept"
        api.create(
            "services",
            service("dns", [("dns", "UDP", 53)], annotations={"lvs-director.io/service-rate": "5"}),
        )
        refused = eventually(
            lambda: [e for e in api.events_for("dns") if e["reason"] == "LimitRefused"],
            what="a rate on a UDP-only Service refused",
        )
        assert "no TCP port" in refused[0]["message"]
        api.patch(
            "services",
            "web",
            {
                "metadata": {
                    "annotations": {
                        "lvs-director.io/client-rate": "off",
                        "lvs-director.io/max-connections": None,
                    }
                }
            },
        )
        eventually(lambda: firewall.limits == {tcp: RateLimit(0, 1000)}, what="client rate off")
        eventually(
            lambda: (
                {d.upper_threshold for d in ipvs.read().services[tcp].real_servers.values()} == {0}
            ),
            what="no threshold",
        )


STATIC = """
ownership: {{networks: [198.51.100.0/24]}}
services:
  - {{name: web, address: 198.51.100.1, port: 80, client_rate: {rate}, service_rate: 900,
     real_servers: [192.0.2.11:8080]}}
"""


def test_a_static_services_rates_follow_a_reload_and_a_udp_one_is_refused_with_its_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "director.yaml"
    path.write_text(STATIC.format(rate=10))
    firewall = FakeFirewall()
    runtime = Runtime(load_config(path), FakeIpvs(), firewall=firewall)
    with runtime.start():
        assert runtime.wait_ready(20)
        eventually(lambda: firewall.limits == {WEB: RateLimit(10, 900)}, what="the limits")
        path.write_text(STATIC.format(rate=30))
        assert runtime.reload(str(path))[0] == "applied"
        eventually(lambda: firewall.limits == {WEB: RateLimit(30, 900)}, what="reloaded")
    udp = (
        "ownership: {networks: [198.51.100.0/24]}\nservices:\n"
        "  - {name: dns, address: 198.51.100.3, port: 53, protocol: udp,\n"
        "     service_rate: 5, real_servers: [192.0.2.11:53]}\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(udp, "bad.yaml")
    assert str(caught.value).startswith(
        "bad.yaml:4: services[0].service_rate: a rate counts TCP connection attempts"
    )
