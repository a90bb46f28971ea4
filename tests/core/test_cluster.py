"""The cluster's objects as the director keeps them: a slice's endpoints in columns (packed
addresses, a byte of conditions, a node each) read back as endpoints, a Service's reference
made once and shared, and a node usable only while ready, not excluded and not going."""

from __future__ import annotations

import socket

from director.core.cluster import (
    READY,
    SERVING,
    TERMINATING,
    Endpoint,
    NodeInfo,
    ServiceInfo,
    SliceInfo,
)


def test_a_slices_columns_read_back_as_its_endpoints() -> None:
    packed = b"".join(socket.inet_pton(socket.AF_INET6, a) for a in ("2001:db8::5", "2001:db8::6"))
    piece = SliceInfo(
        "shop",
        "cart-x1",
        "shop/cart",
        "IPv6",
        (("http", "TCP", 8080),),
        packed=packed,
        conditions=bytes([READY | SERVING, SERVING | TERMINATING]),
        nodes=("n1", None),
    )
    assert piece.ref == "shop/cart-x1"
    assert list(piece.endpoints) == [
        Endpoint("2001:db8::5", True, True, False, "n1"),
        Endpoint("2001:db8::6", False, True, True, None),
    ]
    v4 = SliceInfo(
        "a", "b", "a/s", "IPv4", (), packed=socket.inet_aton("10.0.0.1"), conditions=b"\x01"
    )
    assert list(v4.endpoints) == [Endpoint("10.0.0.1", True, False, False, None)]


def test_a_services_reference_is_made_once_and_shared() -> None:
    def info() -> ServiceInfo:
        return ServiceInfo(
            "shop",
            "cart",
            "u1",
            "LoadBalancer",
            None,
            {},
            (),
            (4,),
            "Cluster",
            None,
            None,
            (),
            0,
            "2026-11-28T00:00:00Z",
        )

    assert info().ref == "shop/cart" and info().ref is info().ref


def test_a_node_is_usable_only_while_ready_not_excluded_and_not_going() -> None:
    assert NodeInfo("n1", ("192.0.2.11",), True, False, False).usable
    assert not NodeInfo("n1", ("192.0.2.11",), False, False, False).usable
    assert not NodeInfo("n1", ("192.0.2.11",), True, True, False).usable
    assert not NodeInfo("n1", ("192.0.2.11",), True, False, True).usable


def test_a_watched_resources_name_says_its_cluster() -> None:
    """``services`` is the one cluster's; ``prod/services`` is cluster prod's."""
    from director.core.cluster import resource_name, split_resource

    assert resource_name("", "services") == "services"
    assert resource_name("prod", "nodes") == "prod/nodes"
    for cluster in ("", "prod"):
        assert split_resource(resource_name(cluster, "endpointslices")) == (
            cluster,
            "endpointslices",
        )
