"""Hypothesis strategies for hostile input: what the Kubernetes API server admits (its schema
and the sloppy forms its legacy IP parser accepts), plus plain garbage in every field.

Shared by the property tests; each field is a mix of realistic values (so that the
interesting code paths run) and anything JSON can hold (so that nothing is assumed)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

PREFIX = "lvs-director.io/"

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def anything(sane: st.SearchStrategy[Any], odds: int = 3) -> st.SearchStrategy[Any]:
    """Mostly ``sane`` (``odds`` to one), sometimes anything at all."""
    return st.one_of(*[sane] * odds, json_values)


octet = st.integers(0, 255)
ipv4 = st.tuples(octet, octet, octet, octet).map(lambda t: ".".join(map(str, t)))
sloppy_ipv4 = st.tuples(octet, octet, octet, octet).map(
    lambda t: ".".join(f"{v:03d}" if i % 2 else str(v) for i, v in enumerate(t))
)
ipv6 = st.ip_addresses(v=6).map(str)
ip_texts = st.one_of(
    ipv4,
    ipv4,
    sloppy_ipv4,
    ipv6,
    ipv6.map(lambda a: a + "%eth0"),  # a zone
    ipv4.map(lambda a: a + ".1"),
    ipv4.map(lambda a: " " + a),  # too long, padded
    st.sampled_from(["256.1.1.1", "1.2.3", "::ffff:1.2.3.4", "", "0x7f.1", "1.2.3.4/32"]),
    st.text(max_size=12),
)
ports = anything(st.one_of(st.integers(-5, 70_000), st.integers(1, 65535), st.integers(1, 65535)))
schedulers = st.sampled_from(["rr", "wlc", "sh", "mh", "lc", "nope", ""])
flag_lists = st.lists(
    st.sampled_from(
        [
            "sh-port",
            "sh-fallback",
            "mh-port",
            "flag-1",
            "flag-2",
            "flag-3",
            "onepacket",
            "bogus",
            "",
        ]
    ),
    max_size=3,
)
annotation_values = st.one_of(
    st.builds(lambda s, f: s + (":" + ",".join(f) if f else ""), schedulers, flag_lists),
    st.sampled_from(
        [
            "nat",
            "dr",
            "tun",
            "NAT",
            "bogus",
            "pod",
            "nodeport",
            "true",
            "false",
            "none",
            "tcp",
            "http:/healthz",
            "https:/x y",
            "http:/é",
            "http:x",
        ]
    ),
    st.lists(ip_texts, max_size=3).map(",".join),
    st.text(max_size=30),
)
annotation_keys = st.sampled_from(
    [
        "scheduler",
        "scheduler-override",
        "forwarding",
        "backends",
        "nodeport",
        "load-balancer-ips",
        "pool",
        "allow-shared-ip",
        "health-check",
    ]
).map(lambda k: PREFIX + k)
names = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
cidrs = st.one_of(
    st.tuples(ip_texts, st.integers(-1, 130)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.sampled_from(["10.0.0.0/8", "0.0.0.0/0", "2001:db8::/32", " 192.168.001.0/24 "]),
    st.text(max_size=10),
)


@st.composite
def service_port(draw: st.DrawFn) -> Any:
    port: dict[str, Any] = {
        "name": draw(anything(st.sampled_from(["", "http", "dns", "x" * 20]))),
        "protocol": draw(anything(st.sampled_from(["TCP", "TCP", "UDP", "SCTP", "ICMP", "tcp"]))),
        "port": draw(ports),
    }
    if draw(st.booleans()):
        port["nodePort"] = draw(ports)
    if draw(st.booleans()):
        port["targetPort"] = draw(anything(st.one_of(ports, st.sampled_from(["http", "Bad!"]))))
    return port


@st.composite
def service_json(draw: st.DrawFn, name: str | None = None, shapeless: bool = True) -> Any:
    """A Service's JSON. ``shapeless``: any field may be any JSON at all; otherwise the
    object has the schema's shape (as the API server stores it) with hostile values."""
    maybe = anything if shapeless else (lambda sane, odds=3: sane)
    types = st.sampled_from(["LoadBalancer"] * 4 + ["NodePort", "ClusterIP"])
    spec: dict[str, Any] = {
        "type": draw(maybe(types)),
        "ports": draw(maybe(st.lists(service_port(), min_size=1, max_size=3), odds=8)),
        "loadBalancerClass": draw(anything(st.sampled_from(["lvs-director.io/ipvs", None]))),
        "ipFamilies": draw(
            anything(st.lists(st.sampled_from(["IPv4", "IPv6", "IPv5"]), max_size=3))
        ),
        "externalTrafficPolicy": draw(anything(st.sampled_from(["Cluster", "Local"]))),
    }
    for field_name, strategy in (
        ("loadBalancerIP", ip_texts),
        ("healthCheckNodePort", ports),
        ("loadBalancerSourceRanges", st.lists(cidrs, max_size=3)),
        ("sessionAffinity", st.sampled_from(["ClientIP", "None"])),
        (
            "sessionAffinityConfig",
            st.fixed_dictionaries({"clientIP": st.fixed_dictionaries({"timeoutSeconds": ports})}),
        ),
        ("allocateLoadBalancerNodePorts", st.booleans()),
    ):
        if draw(st.booleans()):
            spec[field_name] = draw(anything(strategy))
    annotations = draw(anything(st.dictionaries(annotation_keys, annotation_values, max_size=4)))
    status = {
        "loadBalancer": {
            "ingress": draw(anything(st.lists(st.fixed_dictionaries({"ip": ip_texts}), max_size=2)))
        }
    }
    return {
        "metadata": {
            "name": name or draw(names),
            "namespace": "default",
            "uid": "u",
            "annotations": annotations,
            "creationTimestamp": "2026-11-23T00:00:00Z",
        },
        "spec": draw(maybe(st.just(spec), odds=9)),
        "status": draw(maybe(st.just(status), odds=9)),
    }


@st.composite
def slice_json(draw: st.DrawFn, service: str = "web") -> Any:
    endpoint = st.fixed_dictionaries(
        {
            "addresses": anything(st.lists(ip_texts, max_size=3)),
            "conditions": anything(
                st.fixed_dictionaries(
                    {
                        "ready": anything(st.booleans()),
                        "serving": anything(st.booleans()),
                        "terminating": anything(st.booleans()),
                    }
                )
            ),
            "nodeName": anything(st.sampled_from(["n1", "n2", ""])),
        }
    )
    return {
        "metadata": {
            "name": draw(names),
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": draw(anything(st.sampled_from(["IPv4", "IPv6", "FQDN"]))),
        "endpoints": draw(anything(st.lists(endpoint, max_size=4))),
        "ports": draw(
            anything(
                st.lists(
                    st.fixed_dictionaries(
                        {
                            "name": anything(st.sampled_from(["http", ""])),
                            "port": ports,
                            "protocol": anything(st.sampled_from(["TCP", "UDP"])),
                        }
                    ),
                    max_size=2,
                )
            )
        ),
    }


@st.composite
def node_json(draw: st.DrawFn) -> Any:
    address = st.fixed_dictionaries(
        {"type": anything(st.sampled_from(["InternalIP", "Hostname"])), "address": ip_texts}
    )
    return {
        "metadata": {"name": draw(names), "labels": draw(anything(st.just({})))},
        "status": draw(
            anything(
                st.fixed_dictionaries(
                    {
                        "conditions": anything(
                            st.lists(
                                st.fixed_dictionaries(
                                    {
                                        "type": st.just("Ready"),
                                        "status": st.sampled_from(["True", "False"]),
                                    }
                                ),
                                max_size=1,
                            )
                        ),
                        "addresses": anything(st.lists(address, max_size=3)),
                    }
                )
            )
        ),
    }
