"""The API server's JSON read as the director keeps it: a slice's endpoints packed in columns
and read back as the API gave them, addresses canonical and of the slice's family. (Any JSON
at all, through every parser, is ``tests/test_properties.py``'s.)"""

from __future__ import annotations

import ipaddress
from typing import Any

from hypothesis import given, settings, strategies as st

from director.core.cluster_parse import slice_from_json

_CONDITION = st.sampled_from([None, True, False, "yes", 1])  # what a hostile slice may hold
_ENDPOINT = st.fixed_dictionaries(
    {
        "addresses": st.lists(
            st.sampled_from(["10.0.0.1", "10.0.0.01", "10.0.0.2", "fe80::1", "nonsense", 7]),
            max_size=3,
        )
    },
    optional={
        "conditions": st.fixed_dictionaries(
            {}, optional={"ready": _CONDITION, "serving": _CONDITION, "terminating": _CONDITION}
        ),
        "nodeName": st.sampled_from(["node-a", "node-b", "", None, 3]),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ENDPOINT, max_size=6))
def test_a_slices_endpoints_read_back_as_the_api_gave_them(raw: list[dict[str, Any]]) -> None:
    """The slice keeps its endpoints as columns (memory); read back, each address of each
    endpoint comes out with that endpoint's conditions and node, as the API contract says
    (an unset ready is ready, an unset serving follows ready), in the slice's order."""
    info = slice_from_json(
        {"metadata": {"name": "s", "namespace": "ns"}, "addressType": "IPv4", "endpoints": raw}
    )
    expected = []
    for ep in raw:
        cond = ep.get("conditions") or {}
        ready = cond.get("ready") is None or cond.get("ready") is True
        serving = ready if cond.get("serving") is None else cond.get("serving") is True
        node = ep.get("nodeName") if isinstance(ep.get("nodeName"), str) else None
        seen: list[str] = []
        for address in ep["addresses"]:
            text = canonical_sloppy_v4(address)
            if text is not None and text not in seen:
                seen.append(text)
                expected.append(
                    (text, ready, serving, cond.get("terminating") is True, node or None)
                )
    assert [tuple(e) for e in info.endpoints] == expected


def test_an_ipv6_slice_keeps_its_addresses_canonical_and_of_its_family() -> None:
    """Kept packed, an IPv6 slice's addresses read back as canonical text, in order; one
    of the other family is dropped with a reason."""
    endpoints = [
        {"addresses": ["2001:DB8::0001", "10.0.0.1"]},
        {"addresses": ["::ffff:10.0.0.2", "fd00::2"]},
    ]
    info = slice_from_json(
        {
            "metadata": {"name": "s", "namespace": "ns"},
            "addressType": "IPv6",
            "endpoints": endpoints,
        }
    )
    assert info.addresses == ("2001:db8::1", "::ffff:10.0.0.2", "fd00::2")
    assert [ep.address for ep in info.endpoints] == list(info.addresses)
    assert info.problems == (
        "EndpointSlice s: endpoints[0]: '10.0.0.1' is not an IPv6 address; ignored",
    )


def canonical_sloppy_v4(raw: object) -> str | None:
    if not isinstance(raw, str) or ":" in raw:
        return None
    try:
        return str(ipaddress.IPv4Address(".".join(str(int(p)) for p in raw.split("."))))
    except ValueError:
        return None


def test_a_service_with_more_ports_than_the_cap_is_served_on_none_and_says_why() -> None:
    """Issue 71, 4: a Service of 5,000 ports became 5,000 virtual services with no Event.
    Past MAX_PORTS none is read (nothing programmed for it), and the problem says why."""
    from director.core.cluster_parse import MAX_PORTS, service_from_json

    def service(count: int) -> dict[str, Any]:
        ports = [{"port": 1 + i, "protocol": "TCP"} for i in range(count)]
        return {
            "metadata": {"name": "wide", "namespace": "default", "uid": "u"},
            "spec": {"type": "LoadBalancer", "ports": ports},
        }

    refused = service_from_json(service(5000))
    assert refused.ports == ()
    assert refused.problems == (
        f"spec.ports: 5000 ports, more than the {MAX_PORTS} a Service may list here; "
        "none is served until it lists fewer",
    )
    served = service_from_json(service(MAX_PORTS))
    assert len(served.ports) == MAX_PORTS and not served.problems
