"""A Service's options from its annotations and the director's policy: each refused on its
own with a reason, the last valid value kept."""

from __future__ import annotations

from dataclasses import replace

from director.core.model import Forwarding, IpProtocol
from director.core.options import defaults, ipam_request, options, parse_scheduler
from tests.core.test_translate import POLICY, svc


def test_ipam_request_reads_annotations_and_refuses_garbage() -> None:
    request, problems = ipam_request(
        svc(
            annotations={
                "lvs-director.io/load-balancer-ips": "198.51.100.9",
                "lvs-director.io/allow-shared-ip": "k",
            }
        )
    )
    assert request is not None and not problems
    assert [str(a) for a in request.requested] == ["198.51.100.9"]
    assert request.sharing_key == "k"
    none, problems = ipam_request(svc(annotations={"lvs-director.io/load-balancer-ips": "nope"}))
    assert none is None and problems[0].message == "'nope' is not an IP address"


def test_a_scheduler_is_read_with_its_flags_or_refused_with_the_reason() -> None:
    offered = frozenset({"rr", "sh", "mh"})
    assert parse_scheduler(" sh:flag-1, sh-port ", offered) == ("sh", {"sh-fallback", "sh-port"})
    assert parse_scheduler("wlc", offered) == (
        "scheduler 'wlc' is not offered by this kernel (allowed: mh, rr, sh)"
    )
    assert parse_scheduler("rr:sh-port", offered) == (
        "'rr:sh-port': flag 'sh-port' is not valid with scheduler 'rr' (allowed: flag-1, "
        "flag-2, flag-3, onepacket) (write sh:sh-port,sh-fallback)"
    )
    udp = frozenset({IpProtocol.UDP})
    assert parse_scheduler("rr:onepacket", offered, udp) == ("rr", {"onepacket"})
    assert parse_scheduler("rr:onepacket", offered, udp | {IpProtocol.TCP}) == (
        "'rr:onepacket': onepacket scheduling only applies to UDP services"
    )


def test_a_service_over_bgp_defaults_to_maglev_and_tun_and_a_pool_s_forwarding_counts() -> None:
    assert (defaults(POLICY, bgp=False).scheduler, defaults(POLICY, bgp=False).forwarding) == (
        "wlc",
        Forwarding.NAT,
    )
    over_bgp = defaults(POLICY, bgp=True)
    assert (over_bgp.scheduler, over_bgp.flags, over_bgp.forwarding) == (
        "mh",
        {"mh-port", "mh-fallback"},
        Forwarding.TUN,
    )
    assert defaults(POLICY, bgp=True, pool_forwarding=Forwarding.DR).forwarding is Forwarding.DR
    no_mh = replace(POLICY, schedulers=frozenset({"wlc", "rr"}))
    assert defaults(no_mh, bgp=True).scheduler == "wlc"


def test_each_bad_annotation_is_refused_on_its_own_and_the_last_valid_value_is_kept() -> None:
    good, problems = options(svc(annotations={"lvs-director.io/scheduler": "rr"}), POLICY, None)
    assert problems == [] and good.scheduler == "rr" and good.scheduler_source == "annotation"
    bad = svc(
        annotations={
            "lvs-director.io/scheduler": "rr",
            "lvs-director.io/forwarding": "magic",
            "lvs-director.io/local-weights": "sometimes",
        }
    )
    kept, problems = options(bad, POLICY, good)
    assert kept.scheduler == "rr" and kept.forwarding is good.forwarding
    assert kept.local_weights is good.local_weights
    assert sorted(p.annotation for p in problems) == [
        "lvs-director.io/forwarding",
        "lvs-director.io/local-weights",
    ]
