"""Replies decoded by a learnt layout (the kernel's attribute order, read at fixed offsets)
and the same replies walked in full give the same values; an odd reply (attributes
swapped, one extra) is walked in full, never misread by the layout."""

from __future__ import annotations

import socket

from director.core.counters import Counters
from director.core.model import (
    Family,
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.dataplane.kernel import KernelIpvs
from tests.dataplane.test_codec import (
    COUNTS,
    V6,
    dest_message,
    done,
    odd_dest_message,
    scripted_kernel,
    service_message,
    swapped,
)


def test_dest_replies_decode_the_same_laid_out_and_odd_ones_in_full() -> None:
    kernel, sock = scripted_kernel()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    a = RealServer("192.0.2.11", 8080, 3, Forwarding.NAT)
    b = RealServer("192.0.2.12", 65535, 0, Forwarding.DR, 100, 10)
    mixed = RealServer("2001:db8::9", 8080, 1, Forwarding.TUN)
    heavy = RealServer("192.0.2.13", 1, 2**31 - 1, Forwarding.BYPASS, 2**32 - 1, 7)
    for _ in range(2):  # the second read decodes with the layout the first learnt
        seq = kernel._genl.seq + 1
        sock.datagrams = [
            dest_message(a, socket.AF_INET, seq) + dest_message(b, socket.AF_INET, seq),
            dest_message(mixed, socket.AF_INET6, seq)
            + dest_message(heavy, socket.AF_INET, seq)
            + done(seq),
        ]
        assert kernel._dest_configs(key)[0] == {r.key: r for r in (a, b, mixed, heavy)}
    assert kernel._dest_layout is not None
    # A reply of another shape (an unknown attribute first, so every field elsewhere) is
    # decoded in full; so is one of the same length with another attribute in a field's place.
    seq = kernel._genl.seq + 1
    sock.datagrams = [odd_dest_message(a, seq) + done(seq)]
    assert kernel._dest_configs(key)[0] == {a.key: a}
    seq = kernel._genl.seq + 1  # the port's and the weight's attributes swap places
    sock.datagrams = [swapped(dest_message(a, socket.AF_INET, seq), 2, 4) + done(seq)]
    assert kernel._dest_configs(key)[0] == {a.key: a}


def test_dest_counters_decode_the_same_laid_out_and_odd_ones_in_full() -> None:
    """A scrape's read: each real server's counters from STATS64 (64 bits whole), its
    connection counts and weight, the same whether the learnt layout or a full walk of the
    attributes decodes them."""
    kernel, sock = scripted_kernel()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    a = RealServer("192.0.2.11", 8080, 3, Forwarding.NAT)
    mixed = RealServer("2001:db8::9", 65535, 2**31 - 1, Forwarding.TUN)

    def figures(rs: RealServer, family: int) -> dict[str, int]:
        names = ("connections", "packets_in", "packets_out", "bytes_in", "bytes_out")
        counts = dict(zip(names, COUNTS, strict=True))
        head = {"port": rs.port, "weight": rs.weight, "active": 3, "inactive": 1, "persistent": 0}
        return {**head, **counts, "family": family}

    def read() -> dict[tuple[str, int], dict[str, int]]:
        counters = Counters()
        kernel._dest_counters(key, counters)
        counters.add_service(key, (0,) * 5)
        return counters.table()[key][1]

    expected = {a.key: figures(a, socket.AF_INET), mixed.key: figures(mixed, socket.AF_INET6)}
    for _ in range(2):  # the second read decodes with the layout the first learnt
        seq = kernel._genl.seq + 1
        sock.datagrams = [
            dest_message(a, socket.AF_INET, seq) + dest_message(mixed, socket.AF_INET6, seq),
            done(seq),
        ]
        assert read() == expected
    assert kernel._counter_layout is not None
    seq = kernel._genl.seq + 1  # an unknown attribute first: every field elsewhere
    sock.datagrams = [odd_dest_message(a, seq) + done(seq)]
    assert read() == {a.key: figures(a, socket.AF_INET)}
    seq = kernel._genl.seq + 1  # the active and inactive counts swap places
    sock.datagrams = [swapped(dest_message(a, socket.AF_INET, seq), 7, 8) + done(seq)]
    assert read() == {a.key: figures(a, socket.AF_INET)}


def test_services_decode_the_same_laid_out_and_odd_ones_in_full() -> None:
    """A resync's and a scrape's service read: each service's key, configuration (the
    kernel's hashed bit dropped) and counters, whether a learnt layout decodes it (one per
    length: a scheduler's name sets it) or a walk of its attributes does."""
    kernel, sock = scripted_kernel()
    kernel._service_layouts = {}
    services = [
        (ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80), ServiceConfig("rr", netmask=32)),
        (V6, ServiceConfig("sh", frozenset({"sh-port"}), persistence=300, netmask=64)),
        (ServiceKey.mark(Family.INET, 7), ServiceConfig("wlc", netmask=24)),
        (ServiceKey.inet(Protocol.SCTP, "198.51.100.11", 3868), ServiceConfig("lblcr", netmask=32)),
        (ServiceKey.inet(Protocol.UDP, "198.51.100.12", 53), ServiceConfig("rr", netmask=32)),
    ]
    expected = [(key, config, COUNTS) for key, config in services]
    for _ in range(2):  # the second read decodes with the layouts the first learnt
        seq = kernel._genl.seq + 1
        sock.datagrams = [b"".join(service_message(k, c, seq) for k, c in services) + done(seq)]
        assert decoded(kernel) == expected
    # One per length: "rr" and "sh" are as long, and an IPv6 address takes IPv4's 16 bytes.
    assert sorted(kernel._service_layouts) == [244, 272, 276]
    # A persistence engine's name: another shape of another length, decoded in full.
    seq = kernel._genl.seq + 1
    key, config = services[0]
    sock.datagrams = [service_message(key, config, seq, pe=b"sip\0") + done(seq)]
    assert decoded(kernel) == [expected[0]]
    # The same length, the timeout's and the netmask's attributes swapped: decoded in full.
    seq = kernel._genl.seq + 1
    sock.datagrams = [swapped(service_message(key, config, seq), 8, 9) + done(seq)]
    assert decoded(kernel) == [expected[0]]


def decoded(kernel: KernelIpvs) -> list[tuple[ServiceKey, ServiceConfig, tuple[int, ...]]]:
    """Every service of a dump as the kernel adapter decodes it, one message at a time."""
    return [kernel._service(*message) for message in kernel._service_messages()]
