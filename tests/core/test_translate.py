"""Cluster objects -> virtual services: which Services, which backends, which settings."""

from __future__ import annotations

from dataclasses import replace

from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
from director.core.model import KNOWN_SCHEDULERS, Forwarding, IpProtocol as Protocol, ServiceKey
from director.core.policy import Policy
from director.core.pools import Pool
from director.core.translate import translate
from lab.kubeapi import endpoint_slice, node, service

POLICY = Policy(
    load_balancer_class="lvs-director.io/ipvs",
    default_class=False,
    nodeport_vips=(),
    backends="nodeport",
    scheduler="wlc",
    forwarding=Forwarding.NAT,
    weight=1,
    schedulers=frozenset(KNOWN_SCHEDULERS),
)
NODES = {
    n["metadata"]["name"]: node_from_json(n)
    for n in (
        node("n1", "192.0.2.11"),
        node("n2", "192.0.2.12"),
        node("n3", "192.0.2.13", ready=False),
        node(
            "n4",
            "192.0.2.14",
            labels={"node.kubernetes.io/exclude-from-external-load-balancers": ""},
        ),
    )
}


def svc(name: str = "web", **kw):  # type: ignore[no-untyped-def]
    obj = service(name, [("http", "TCP", 80)], **kw)
    obj["metadata"]["namespace"] = "shop"
    obj["spec"]["ports"][0]["nodePort"] = 30080
    obj["spec"]["ports"][0]["targetPort"] = 8080
    return service_from_json(obj)


def slices(*endpoints, name: str = "web"):  # type: ignore[no-untyped-def]
    obj = endpoint_slice(name, list(endpoints), [("http", "TCP", 8080)])
    obj["metadata"]["namespace"] = "shop"
    return [slice_from_json(obj)]


KEY = ServiceKey.inet(Protocol.TCP, "198.51.100.1", 80)


def test_nodeport_mode_balances_over_usable_nodes_at_the_node_port() -> None:
    out = translate(svc(), ["198.51.100.1"], [], NODES, POLICY)
    vs = out.services[KEY]
    assert sorted(vs.real_servers) == [("192.0.2.11", 30080), ("192.0.2.12", 30080)]
    assert vs.origin == "shop/web:http"
    assert vs.config.scheduler == "wlc"


def test_dr_sends_to_the_node_at_the_service_port() -> None:
    s = svc(annotations={"lvs-director.io/forwarding": "dr"})
    vs = translate(s, ["198.51.100.1"], [], NODES, POLICY).services[KEY]
    assert sorted(vs.real_servers) == [("192.0.2.11", 80), ("192.0.2.12", 80)]
    assert {rs.forwarding for rs in vs.real_servers.values()} == {Forwarding.DR}


def test_local_traffic_policy_keeps_only_nodes_with_a_ready_endpoint() -> None:
    s = svc(etp="Local")
    eps = slices(("10.1.0.5", "n2", True, False))
    vs = translate(s, ["198.51.100.1"], eps, NODES, POLICY).services[KEY]
    assert list(vs.real_servers) == [("192.0.2.12", 30080)]


THREE = {name: node_from_json(node(name, f"192.0.2.2{i}")) for i, name in enumerate("abc", 1)}


def pods(spread: dict[str, int], *, terminating: str | None = None):  # type: ignore[no-untyped-def]
    """Ready pods per node (10.1.<node>.<i>), and one terminating on ``terminating``."""
    eps = [
        (f"10.1.{ord(n)}.{i}", n, True, False) for n, count in spread.items() for i in range(count)
    ]
    if terminating is not None:
        eps.append(("10.1.99.1", terminating, True, True))
    return slices(*eps)


def local_weights(spread: dict[str, int], **kw):  # type: ignore[no-untyped-def]
    out = translate(svc(etp="Local", **kw), ["198.51.100.1"], pods(spread), THREE, POLICY)
    return {k[0]: rs.weight for k, rs in out.services[KEY].real_servers.items()}, out


def test_local_traffic_policy_weighs_each_node_by_its_ready_pods() -> None:
    """MetalLB's most asked-for fix: ETP Local with pods spread 1:2:5 over three nodes gets
    the same 1:2:5 of the traffic, not a third each (a node's kube-proxy serves only its own)."""
    weights, _ = local_weights({"a": 1, "b": 2, "c": 5})
    assert weights == {"192.0.2.21": 1, "192.0.2.22": 2, "192.0.2.23": 5}
    on_vip = replace(POLICY, nodeport_vips=("198.51.100.99",))  # the NodePort VIP alike
    out = translate(svc(etp="Local"), ["198.51.100.1"], pods({"a": 1, "b": 2}), THREE, on_vip)
    vip = out.services[ServiceKey.inet(Protocol.TCP, "198.51.100.99", 30080)]
    assert {k[0]: rs.weight for k, rs in vip.real_servers.items()} == {
        "192.0.2.21": 1,
        "192.0.2.22": 2,
    }
    policy = replace(POLICY, weight=10)  # in units of the configured weight
    out = translate(svc(etp="Local"), ["198.51.100.1"], pods({"a": 1, "c": 3}), THREE, policy)
    assert {k[0]: rs.weight for k, rs in out.services[KEY].real_servers.items()} == {
        "192.0.2.21": 10,
        "192.0.2.23": 30,
    }


def test_local_weights_count_ready_pods_once_and_terminating_ones_not_at_all() -> None:
    eps = slices(
        ("10.1.0.1", "a", True, False),
        ("10.1.0.2", "a", True, False),
        ("10.1.0.3", "b", True, True),
    )
    again = slices(("10.1.0.2", "a", True, False), name="web")  # a pod in two slices at once
    out = translate(svc(etp="Local"), ["198.51.100.1"], [*eps, *again], THREE, POLICY)
    weights = {k[0]: rs.weight for k, rs in out.services[KEY].real_servers.items()}
    assert weights == {"192.0.2.21": 2, "192.0.2.22": 0}, "b only drains: its pod is going"
    assert out.draining == {(KEY, ("192.0.2.22", 30080))}


def test_local_weights_are_capped_at_the_highest_weight_ipvs_takes() -> None:
    policy = replace(POLICY, weight=1000)
    out = translate(svc(etp="Local"), ["198.51.100.1"], pods({"a": 70}), THREE, policy)
    assert [rs.weight for rs in out.services[KEY].real_servers.values()] == [65535]


def test_local_weights_can_be_turned_off_per_service_and_a_bad_value_is_refused() -> None:
    even = {"lvs-director.io/local-weights": "even"}
    weights, _ = local_weights({"a": 1, "b": 2, "c": 5}, annotations=even)
    assert weights == {"192.0.2.21": 1, "192.0.2.22": 1, "192.0.2.23": 1}
    weights, out = local_weights(
        {"a": 1, "b": 2}, annotations={"lvs-director.io/local-weights": "pods"}
    )
    assert weights == {"192.0.2.21": 1, "192.0.2.22": 2}, "the default stands"
    assert [(p.annotation, p.message) for p in out.problems] == [
        ("lvs-director.io/local-weights", "'pods' is not one of endpoints, even")
    ]


def test_cluster_traffic_policy_keeps_every_node_at_the_same_weight() -> None:
    out = translate(svc(), ["198.51.100.1"], pods({"a": 1, "b": 2, "c": 5}), THREE, POLICY)
    assert {rs.weight for rs in out.services[KEY].real_servers.values()} == {1}


def test_pod_mode_uses_ready_endpoints_and_drains_terminating_ones() -> None:
    s = svc(annotations={"lvs-director.io/backends": "pod"})
    eps = slices(
        ("10.1.0.5", "n1", True, False),
        ("10.1.0.6", "n2", True, True),
        ("10.1.0.7", "n2", False, False),
    )
    out = translate(s, ["198.51.100.1"], eps, NODES, POLICY)
    weights = {k: rs.weight for k, rs in out.services[KEY].real_servers.items()}
    assert weights == {("10.1.0.5", 8080): 1, ("10.1.0.6", 8080): 0}
    assert out.draining == {(KEY, ("10.1.0.6", 8080))}


def test_scheduler_annotation_with_flags_and_affinity() -> None:
    s = svc(annotations={"lvs-director.io/scheduler": "sh:sh-port,sh-fallback"}, affinity=600)
    out = translate(s, ["198.51.100.1"], [], NODES, POLICY)
    config = out.services[KEY].config
    assert (config.scheduler, config.flags, config.persistence) == (
        "sh",
        frozenset({"sh-port", "sh-fallback"}),
        600,
    )
    assert out.options is not None and out.options.scheduler_source == "annotation"


def test_invalid_annotation_is_refused_and_the_last_valid_value_kept() -> None:
    good = translate(
        svc(annotations={"lvs-director.io/scheduler": "lc"}), ["198.51.100.1"], [], NODES, POLICY
    )
    bad_svc = svc(
        annotations={"lvs-director.io/scheduler": "fastest", "lvs-director.io/forwarding": "magic"}
    )
    bad = translate(bad_svc, ["198.51.100.1"], [], NODES, POLICY, previous=good.options)
    assert bad.services[KEY].config.scheduler == "lc"
    messages = {p.annotation: p.message for p in bad.problems}
    assert (
        "scheduler 'fastest' is not offered by this kernel (allowed: dh, fo"
        in messages["lvs-director.io/scheduler"]
    )
    assert messages["lvs-director.io/forwarding"] == "'magic' is not one of nat, fullnat, dr, tun"


def test_class_selection_and_nodeport_vip() -> None:
    other = svc(lb_class="example.com/other")
    assert translate(other, ["198.51.100.1"], [], NODES, POLICY).services == {}
    classless = svc(lb_class=None)
    assert translate(classless, ["198.51.100.1"], [], NODES, POLICY).services == {}
    np_policy = Policy(
        POLICY.load_balancer_class,
        True,
        ("192.0.2.100",),
        "nodeport",
        "rr",
        Forwarding.NAT,
        1,
        POLICY.schedulers,
    )
    out = translate(classless, ["198.51.100.1"], [], NODES, np_policy)
    assert set(out.services) == {KEY, ServiceKey.inet(Protocol.TCP, "192.0.2.100", 30080)}
    opted_out = svc(lb_class=None, annotations={"lvs-director.io/nodeport": "false"})
    assert set(translate(opted_out, ["198.51.100.1"], [], NODES, np_policy).services) == {KEY}


def test_annotation_flags_are_canonical_and_onepacket_needs_udp() -> None:
    """Issue 13, items 4 and 5: the annotation's flag-1 is what the kernel calls sh-fallback,
    and onepacket is refused for a TCP Service (the configuration refuses it too)."""
    out = translate(
        svc(annotations={"lvs-director.io/scheduler": "sh:flag-1,flag-2"}),
        ["198.51.100.1"],
        [],
        NODES,
        POLICY,
    )
    assert out.services[KEY].config.flags == {"sh-fallback", "sh-port"}
    tcp = translate(
        svc(annotations={"lvs-director.io/scheduler": "rr:onepacket"}),
        ["198.51.100.1"],
        [],
        NODES,
        POLICY,
    )
    assert [(p.annotation, p.message) for p in tcp.problems] == [
        (
            "lvs-director.io/scheduler",
            "'rr:onepacket': onepacket scheduling only applies to UDP services",
        )
    ]
    assert tcp.services[KEY].config.flags == frozenset(), "the last valid setting is kept"
    obj = service(
        "dns", [("dns", "UDP", 53)], annotations={"lvs-director.io/scheduler": "rr:onepacket"}
    )
    obj["spec"]["ports"][0]["nodePort"] = 30053
    udp = translate(service_from_json(obj), ["198.51.100.1"], [], NODES, POLICY)
    assert udp.problems == ()
    key = ServiceKey.inet(Protocol.UDP, "198.51.100.1", 53)
    assert udp.services[key].config.flags == {"onepacket"}


def test_load_balancer_source_ranges_restrict_each_address_to_its_family() -> None:
    obj = service("web", [("http", "TCP", 80)], families=("IPv4", "IPv6"))
    obj["spec"]["ports"][0]["nodePort"] = 30080
    obj["spec"]["loadBalancerSourceRanges"] = [
        "10.0.0.0/8",
        " 192.168.001.0/24",
        "2001:db8::/32",
        "not-a-range",
    ]
    info = service_from_json(obj)
    assert info.source_ranges == ("10.0.0.0/8", "192.168.1.0/24", "2001:db8::/32")
    out = translate(info, ["198.51.100.1", "2001:db8:100::1"], [], NODES, POLICY)
    v6 = ServiceKey.inet(Protocol.TCP, "2001:db8:100::1", 80)
    assert out.restrictions == {KEY: ("10.0.0.0/8", "192.168.1.0/24"), v6: ("2001:db8::/32",)}
    assert [p.reason for p in out.problems] == ["InvalidServiceField"]
    assert "'not-a-range' is not a CIDR" in out.problems[0].message
    legacy = service(
        "old",
        [("http", "TCP", 80)],
        annotations={
            "service.beta.kubernetes.io/load-balancer-source-ranges": "10.1.0.0/16,10.2.0.0/16"
        },
    )
    assert service_from_json(legacy).source_ranges == ("10.1.0.0/16", "10.2.0.0/16")
    assert service_from_json(service("open", [("http", "TCP", 80)])).source_ranges is None


def test_full_nat_masquerades_to_the_node_port_and_asks_for_the_snat_rule() -> None:
    """fullnat: IPVS masquerades (nat, at the node port) and the key is handed to the SNAT
    rule, for the families the box has an SNAT address of; the others are refused."""
    from director.core.model import Family

    policy = replace(POLICY, snat=frozenset({Family.INET}))
    s = svc(annotations={"lvs-director.io/forwarding": "fullnat"})
    out = translate(s, ["198.51.100.1"], [], NODES, policy)
    vs = out.services[KEY]
    assert sorted(vs.real_servers) == [("192.0.2.11", 30080), ("192.0.2.12", 30080)]
    assert {rs.forwarding for rs in vs.real_servers.values()} == {Forwarding.NAT}
    assert out.snat == frozenset({KEY}) and out.problems == ()
    v6 = ServiceKey.inet(Protocol.TCP, "2001:db8:100::1", 80)
    dual = translate(s, ["198.51.100.1", "2001:db8:100::1"], [], NODES, policy)
    assert KEY in dual.services and v6 not in dual.services and dual.snat == {KEY}
    assert [p.reason for p in dual.problems] == ["ForwardingRefused"]
    assert "fullnat needs an IPv6 address in snat.addresses" in dual.problems[0].message
    over_bgp = translate(s, ["198.51.100.1"], [], NODES, policy, bgp=True)
    assert over_bgp.snat == {KEY}, "each director leaves from its own address: no NAT_OVER_BGP"
    plain = translate(svc(), ["198.51.100.1"], [], NODES, policy)
    assert plain.snat == frozenset()


def test_a_pool_s_forwarding_is_its_services_default_and_the_annotation_wins() -> None:
    from director.core.model import Family

    policy = replace(POLICY, snat=frozenset({Family.INET}))
    pool = Pool.parse("p", ["198.51.100.0/24"], forwarding=Forwarding.FULLNAT)
    out = translate(svc(), ["198.51.100.1"], [], NODES, policy, pool=pool)
    assert out.snat == {KEY} and out.options is not None
    assert out.options.forwarding is Forwarding.FULLNAT
    dr = svc(annotations={"lvs-director.io/forwarding": "dr"})
    out = translate(dr, ["198.51.100.1"], [], NODES, policy, pool=pool)
    assert out.snat == frozenset() and out.options is not None
    assert out.options.forwarding is Forwarding.DR


def test_a_pools_guard_switch_and_limits_are_its_services_and_an_annotation_wins() -> None:
    from director.core.model import Caps, RateLimit

    policy = replace(POLICY, syn_guard=True)
    quiet = Pool.parse("p", ["198.51.100.0/24"], syn_guard=False, caps=Caps(RateLimit(9), 50))
    out = translate(svc(), ["198.51.100.1"], [], NODES, policy, pool=quiet)
    assert out.guard == frozenset() and out.limits == {KEY: RateLimit(9)}
    on = svc(annotations={"lvs-director.io/syn-guard": "on", "lvs-director.io/client-rate": "3"})
    out = translate(on, ["198.51.100.1"], [], NODES, policy, pool=quiet)
    assert out.guard == {KEY} and out.limits == {KEY: RateLimit(3)}
    assert translate(svc(), ["198.51.100.1"], [], NODES, policy).guard == {KEY}


def test_an_endpoint_that_is_the_box_or_a_vip_is_refused_with_a_reason() -> None:
    """Issue 71, 4: a selector-less Service's hand-made EndpointSlice could point a VIP at
    the box's own addresses or at another VIP. Such endpoints are refused (an Event says
    which and why, once each); the others serve."""
    from director.core.policy import Reserved
    from director.core.pools import Pool

    pool = Pool.parse("tenants", ["198.51.100.0/28"])
    policy = replace(
        POLICY,
        backends="pod",
        reserved=Reserved({"192.0.2.254": "the box's SNAT address"}, (pool,)),
    )
    eps = slices(
        ("10.1.0.5", "n1", True, False),
        ("192.0.2.254", "n1", True, False),
        ("198.51.100.9", "n2", True, False),
    )
    out = translate(svc(), ["198.51.100.1"], eps, NODES, policy)
    assert list(out.services[KEY].real_servers) == [("10.1.0.5", 8080)]
    refused = [p for p in out.problems if p.reason == "EndpointRefused"]
    assert [p.message.split(":")[0] for p in refused] == [
        "endpoint 192.0.2.254 is the box's SNAT address",
        "endpoint 198.51.100.9 is an address of pool 'tenants' (a VIP)",
    ]


def test_an_unknown_annotation_and_a_broken_health_check_are_said_at_once() -> None:
    """Issue 71, 4: a typo under lvs-director.io/ (``schedular``) got no Event, and
    lvs-director.io/health-check was not read at all while the file had no health checks:
    a broken value surfaced only once checks were turned on."""
    s = svc(
        annotations={
            "lvs-director.io/schedular": "sh",
            "lvs-director.io/health-check": "htp:/healthz",
        }
    )
    out = translate(s, ["198.51.100.1"], [], NODES, POLICY)  # no health checks configured
    said = {p.annotation: (p.reason, p.message) for p in out.problems}
    reason, message = said["lvs-director.io/schedular"]
    assert reason == "UnknownAnnotation" and "known: " in message and "scheduler" in message
    assert "lvs-director.io/health-check" in said
    assert out.services[KEY].config.scheduler == "wlc"  # the typo changed nothing


def test_hostile_limit_and_sorry_annotations_are_refused_not_raised() -> None:
    """Thousands of digits (int() refuses past 4,300 with an error of its own), other
    scripts' digits: each refused with a reason, the Service translated all the same."""
    hostile = {
        "lvs-director.io/client-rate": "9" * 5000,
        "lvs-director.io/service-rate": "٨٠",
        "lvs-director.io/max-connections": "-1",
        "lvs-director.io/sorry-server": "192.0.2.9:" + "9" * 5000,
    }
    out = translate(svc(annotations=hostile), ["198.51.100.1"], [], NODES, POLICY)
    said = {p.annotation for p in out.problems}
    assert set(hostile) <= said, out.problems
    assert out.limits == {} and out.sorry == {} and KEY in out.services
