"""A service's real servers read whole and marked: a reply that says what the read before
found (its counters aside) is taken as read then, never decoded again; any other is decoded;
the mark does not depend on how the kernel cut the reply into datagrams. Scripted replies
as the kernel writes them (``tests.dataplane.test_codec``); the kernel's own in
``test_conformance``."""

from __future__ import annotations

import socket
import struct

from hypothesis import given, settings, strategies as st

from director.core.model import (
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.dataplane.codec import CMD_ATTR_SERVICE, encode_service_key
from director.dataplane.kernel import KernelIpvs
from director.dataplane.layouts import dest_settled
from director.dataplane.netlink import pack_nla
from director.dataplane.replies import dest_request_of
from tests.dataplane.test_codec import (
    COUNTS,
    dest_message,
    done,
    odd_dest_message,
    scripted_kernel,
    service_message,
)


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


def test_a_dest_request_is_the_service_s_own_attribute() -> None:
    """What a resync asks the kernel for a service's real servers: the service's attribute
    from its GET_SERVICE reply, whole (the key the kernel reads from it is the one encoded
    afresh); a message that holds no service attribute gives none."""
    key = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
    message = service_message(key, ServiceConfig("rr"), 7)
    request = dest_request_of(message, 0, len(message))
    assert request is not None and request == message[20:]
    assert request.startswith(struct.pack("=HH", len(request), CMD_ATTR_SERVICE | 0x8000))
    assert pack_nla(CMD_ATTR_SERVICE, encode_service_key(key))[4:] in request
    rs = dest_message(RealServer("192.0.2.11", 8080), socket.AF_INET, 7)
    assert dest_request_of(rs, 0, len(rs)) is None
