"""Replies decoded by a learnt layout (the kernel's attribute order, read at fixed offsets)
and the same replies walked in full give the same values; an odd reply (attributes
swapped, one extra) is walked in full, never misread by the layout."""

from __future__ import annotations

import socket

from hypothesis import given, settings, strategies as st

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
from director.dataplane.layouts import dest_settled
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


def _reply(
    kernel: KernelIpvs,
    sock: object,
    servers: list[RealServer],
    counts: tuple[int, ...] = COUNTS,
    conns: tuple[int, int, int] = (3, 1, 0),
) -> None:
    """The kernel's next GET_DEST reply: ``servers`` in this order, with these counters."""
    seq = kernel._genl.seq + 1
    sock.datagrams = [  # type: ignore[attr-defined]
        b"".join(
            dest_message(rs, socket.AF_INET, seq, counts=counts, conns=conns) for rs in servers
        )
        + done(seq)
    ]


def test_a_reply_whose_counters_alone_moved_is_taken_as_read_before() -> None:
    """A resync reads each service's real servers with what the read before found: a reply
    that differs in what traffic changes (connection counts, packets, bytes) is not decoded
    again and comes back as the very object read before. A weight, a threshold, a
    forwarding method, a real server more or fewer, or the same real servers in another
    order (the hashing schedulers follow it) comes back as the kernel now holds it."""
    kernel, sock = scripted_kernel()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    a = RealServer("192.0.2.11", 8080, 3, Forwarding.NAT)
    b = RealServer("192.0.2.12", 8080, 1, Forwarding.NAT, 100, 10)
    _reply(kernel, sock, [a, b])
    first, mark = kernel._dest_configs(key)
    assert mark is not None and list(first.values()) == [a, b]

    _reply(kernel, sock, [a, b], counts=(9, 8, 7, 6, 5), conns=(40, 2, 1))
    again, same = kernel._dest_configs(key, (mark, first))
    assert again is first and same == mark

    changed = {
        "weight": [a, b._replace(weight=2)],
        "upper threshold": [a, b._replace(upper_threshold=101)],
        "lower threshold": [a, b._replace(lower_threshold=0)],
        "forwarding": [a._replace(forwarding=Forwarding.DR), b],
        "port": [a._replace(port=8081), b],
        "one more": [a, b, RealServer("192.0.2.13", 8080)],
        "one fewer": [a],
        "order": [b, a],
    }
    for what, servers in changed.items():
        _reply(kernel, sock, servers)
        got, other = kernel._dest_configs(key, (mark, first))
        assert other != mark, what
        assert got is not first and list(got.values()) == servers, what

    # A message of another layout has no mark: it is decoded, never taken as read before.
    seq = kernel._genl.seq + 1
    sock.datagrams = [odd_dest_message(a, seq) + done(seq)]
    got, none = kernel._dest_configs(key, (mark, first))
    assert none is None and got == {a.key: a}


def test_a_reply_is_marked_alike_however_the_kernel_cut_it_into_datagrams() -> None:
    """The kernel sends a dump's NLMSG_DONE in a datagram of its own, and a service's real
    servers over as many datagrams as they fill: a datagram taken whole and one split
    message by message (a stray message of an older request among them) give the same
    mark and the same real servers."""
    kernel, sock = scripted_kernel()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    servers = [RealServer(f"192.0.2.{i}", 8080, i) for i in range(1, 6)]
    _reply(kernel, sock, servers)  # learns the layout
    _, mark = kernel._dest_configs(key)

    def cut(*parts: tuple[int, int], stray: bool = False) -> None:
        seq = kernel._genl.seq + 1
        grams = [
            b"".join(dest_message(rs, socket.AF_INET, seq) for rs in servers[a:b]) for a, b in parts
        ]
        if stray:  # an answer to an earlier request, left in the socket
            grams[0] = dest_message(servers[0], socket.AF_INET, seq - 1) + grams[0]
        sock.datagrams = [*grams, done(seq)]

    for parts, stray in (
        (((0, 5),), False),
        (((0, 2), (2, 5)), False),
        (((0, 1), (1, 4), (4, 5)), True),
    ):
        cut(*parts, stray=stray)
        got, again = kernel._dest_configs(key)
        assert again == mark and list(got.values()) == servers, parts


def test_a_whole_read_forgets_the_services_it_no_longer_finds() -> None:
    """What a read keeps for the next one is each service the kernel held this time: a
    service deleted since takes its real servers with it (memory follows the table)."""
    kernel, sock = scripted_kernel()
    one = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    two = ServiceKey.inet(Protocol.TCP, "198.51.100.11", 80)
    rr = ServiceConfig("rr")
    a = RealServer("192.0.2.11", 8080)

    def kernel_holds(*keys: ServiceKey) -> None:
        seq = kernel._genl.seq + 1
        datagrams = [b"".join(service_message(k, rr, seq) for k in keys) + done(seq)]
        for n, _key in enumerate(keys, start=2):
            datagrams.append(dest_message(a, socket.AF_INET, seq + n - 1) + done(seq + n - 1))
        sock.datagrams = datagrams

    kernel_holds(one, two)
    first = kernel.read().services
    assert set(kernel._settled) == {one, two}
    kernel_holds(one)
    after = kernel.read(known=first).services
    assert set(after) == {one} and after[one] is first[one]
    assert set(kernel._settled) == {one}
    assert kernel._settled[one][1] is first[one].real_servers


_servers = st.lists(
    st.builds(
        RealServer,
        st.sampled_from(["192.0.2.11", "192.0.2.12", "192.0.2.13"]),
        st.sampled_from([80, 8080]),
        st.integers(0, 3),
        st.sampled_from([Forwarding.NAT, Forwarding.DR]),
        st.sampled_from([0, 5]),
        st.sampled_from([0, 2]),
    ),
    max_size=4,
    unique_by=lambda rs: rs.key,
)
_traffic = st.tuples(st.integers(0, 2**64 - 1), *[st.integers(0, 2**32 - 1)] * 4)
_conns = st.tuples(*[st.integers(0, 2**32 - 1)] * 3)


_reply_of = st.tuples(_servers, _traffic, _conns)  # real servers, counters, connections


@settings(max_examples=200, deadline=None)
@given(_reply_of, _reply_of)
def test_two_replies_share_a_mark_exactly_when_they_decode_alike(
    one: tuple[list[RealServer], tuple[int, ...], tuple[int, int, int]],
    two: tuple[list[RealServer], tuple[int, ...], tuple[int, int, int]],
) -> None:
    """Whatever the counters and connection counts, two replies are marked alike when
    they hold the same real servers, configured alike, in the same order, and only then."""
    kernel, sock = scripted_kernel()
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    _reply(kernel, sock, *one)
    got_one, mark_one = kernel._dest_configs(key)
    _reply(kernel, sock, *two)
    got_two, mark_two = kernel._dest_configs(key)
    assert list(got_one.values()) == one[0] and list(got_two.values()) == two[0]
    assert mark_one is not None and mark_two is not None
    assert (mark_one == mark_two) == (one[0] == two[0])


def test_the_settled_pieces_leave_out_the_header_and_what_traffic_changes() -> None:
    """The pieces a mark is made of: not the sequence number, not the counters; the
    address, port, weight, thresholds and family are in them."""
    a = RealServer("192.0.2.11", 8080, 7, Forwarding.NAT, 100, 10)
    message = dest_message(a, socket.AF_INET, 1)
    settled = dest_settled(message, 0, len(message))
    assert settled is not None and settled.size == len(message)
    pieces = settled.unpack_from(message)
    other = dest_message(a, socket.AF_INET, 99, counts=(1, 2, 3, 4, 5), conns=(9, 9, 9))
    assert settled.unpack_from(other) == pieces
    heavier = dest_message(a._replace(weight=8), socket.AF_INET, 1)
    assert settled.unpack_from(heavier) != pieces
    assert dest_settled(message[:20] + b"\x08\x00\x07\x00", 0, 24) is None  # not a real server


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
