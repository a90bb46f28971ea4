"""What a Service asks, read from its annotations: an address request and a scheduler with
its flags, or the reason each is refused."""

from __future__ import annotations

from director.core.annotations import ipam_request, parse_scheduler
from director.core.model import IpProtocol
from tests.core.test_translate import svc


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
