"""The kernel's text of the table, marked service by service: what a resync may skip."""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from director.core.model import (
    Family,
    Forwarding,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
    canonical_address,
)
from director.core.services import VirtualService
from director.dataplane.proctext import (
    PARTS,
    SHARE,
    Rotation,
    block_marks,
    changed_keys,
    marks_of,
    prefix_of,
    render,
)

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
DNS6 = ServiceKey.inet(Protocol.UDP, "2001:db8:100::53", 53)
MARK = ServiceKey.mark(Family.INET, 7)
A = RealServer("192.0.2.11", 8080)
B = RealServer("192.0.2.12", 8080, weight=3)
_COUNTS = re.compile(rb"(?m)^(  -> .*?)0          0         $")


def service(
    key: ServiceKey, *servers: RealServer, config: ServiceConfig | None = None
) -> VirtualService:
    return VirtualService(key, config or ServiceConfig("rr"), {rs.key: rs for rs in servers})


def with_counts(text: bytes, counts: list[tuple[int, int]]) -> bytes:
    """``text`` with each real server's connection counts, in turn, as the kernel prints
    them (traffic moves them; nothing else)."""
    it = iter(counts)

    def put(match: re.Match[bytes]) -> bytes:
        active, inactive = next(it, (0, 0))
        return match.group(1) + b"%-10d %-10d" % (active, inactive)

    return _COUNTS.sub(put, text)


def marks(*services: VirtualService, counts: list[tuple[int, int]] | None = None) -> list[int]:
    text = render(services)
    if counts:
        text = with_counts(text, counts)
    return [mark for _prefix, mark in block_marks(text)]


def test_connection_counts_leave_the_mark_alone_and_configuration_does_not() -> None:
    before = marks(service(WEB, A, B))
    assert marks(service(WEB, A, B), counts=[(5, 100), (12345, 99999)]) == before
    for changed in (
        service(WEB, A._replace(weight=7), B),  # a weight
        service(WEB, A._replace(forwarding=Forwarding.DR), B),  # a method the text shows
        service(WEB, B),  # a real server fewer
        service(WEB, B, A),  # the same, in another order
        service(WEB, A, B, config=ServiceConfig("wlc")),  # the scheduler
        service(WEB, A, B, config=ServiceConfig("rr", persistence=300)),
    ):
        assert marks(changed) != before, changed


def test_what_the_text_cannot_show_leaves_the_mark_alone() -> None:
    """Thresholds, and a bypass printed as masquerading: why a share of the services is
    still read in full every resync."""
    before = marks(service(WEB, A, B))
    assert marks(service(WEB, A._replace(upper_threshold=50, lower_threshold=5), B)) == before
    assert marks(service(WEB, A._replace(forwarding=Forwarding.BYPASS), B)) == before


def test_mixed_lines_and_wide_counts_are_marked_line_by_line() -> None:
    """A service whose real servers' lines differ in length (an IPv6 tunnel beside IPv4)
    is cut line by line, its counts left out all the same; a count wider than its column
    moves a digit into the mark, so the service is read again rather than missed."""
    tunnel = RealServer("2001:db8::9", 8080, forwarding=Forwarding.TUN)
    mixed = service(WEB, A, tunnel)
    assert marks(mixed, counts=[(3, 4), (5, 6)]) == marks(mixed)
    assert marks(mixed) != marks(service(WEB, A, tunnel._replace(weight=2)))
    wide = with_counts(render([service(WEB, A, B)]), [(0, 0), (-2147483648, 0)])
    assert [m for _p, m in block_marks(wide)] != marks(service(WEB, A, B))


def test_each_block_begins_with_its_services_prefix() -> None:
    text = render([service(WEB, A), service(DNS6, RealServer("2001:db8::1", 53)), service(MARK)])
    assert [prefix for prefix, _mark in block_marks(text)] == [
        prefix_of(WEB),
        prefix_of(DNS6),
        prefix_of(MARK),
    ]
    assert prefix_of(WEB) == b"TCP  C633640A:0050"
    assert prefix_of(DNS6) == b"UDP  [2001:0db8:0100:0000:0000:0000:0000:0053]:0035"
    assert block_marks(render([])) == []


_SERVERS = st.lists(
    st.tuples(st.integers(1, 250), st.integers(0, 3), st.sampled_from(list(Forwarding)[:4])),
    max_size=6,
    unique_by=lambda t: t[0],
)


@settings(max_examples=200, deadline=None)
@given(_SERVERS, _SERVERS, st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**9))))
def test_two_services_share_a_mark_exactly_when_the_text_shows_them_alike(
    first: list[tuple[int, int, Forwarding]],
    second: list[tuple[int, int, Forwarding]],
    counts: list[tuple[int, int]],
) -> None:
    def made(rows: list[tuple[int, int, Forwarding]]) -> VirtualService:
        return service(WEB, *(RealServer(f"192.0.2.{n}", 80, w, f) for n, w, f in rows))

    def shown(rows: list[tuple[int, int, Forwarding]]) -> list[tuple[int, int, str]]:
        return [
            (n, w, "Masq" if f in (Forwarding.NAT, Forwarding.BYPASS) else f.name)
            for n, w, f in rows
        ]

    same = marks(made(first), counts=counts) == marks(made(second))
    assert same == (shown(first) == shown(second))


def table(n: int) -> list[VirtualService]:
    return [
        service(ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{i % 250 + 1}", 80), A)
        for i in range(n)
    ]


def test_a_small_table_is_read_in_full_every_time() -> None:
    rotation = Rotation()
    rotation.done(SHARE, 0)
    assert not rotation.wants_text()
    share = rotation.plan(None)
    assert all(share.full(hash(vs.key), vs.key) for vs in table(10))


def test_an_unchanged_big_table_is_read_a_share_at_a_time_and_all_within_the_parts() -> None:
    services = table(SHARE * PARTS + 1)
    text = render(services)
    rotation = Rotation()
    rotation.added(len(services))
    assert rotation.wants_text()
    first = rotation.plan(block_marks(text))
    assert all(first.full(hash(vs.key), vs.key) for vs in services)  # nothing to compare with yet
    seen: set[ServiceKey] = set()
    for _ in range(PARTS):
        share = rotation.plan(block_marks(text))
        full = {vs.key for vs in services if share.full(hash(vs.key), vs.key)}
        assert len(full) < len(services) / 5  # about a tenth each time
        seen |= full
    assert seen == {vs.key for vs in services}


def test_a_service_whose_text_changed_is_read_in_full_at_once() -> None:
    services = table(SHARE * 3)
    rotation = Rotation()
    rotation.added(len(services))
    rotation.plan(block_marks(render(services)))
    changed = services[1234]
    services[1234] = service(changed.key, A._replace(weight=9))
    share = rotation.plan(block_marks(render(services)))
    assert share.full(hash(changed.key), changed.key)
    assert share.changed == {changed.key}
    rotation.forget()  # a read that failed part way
    after = rotation.plan(block_marks(render(services)))
    assert all(after.full(hash(vs.key), vs.key) for vs in services)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4000), max_size=12))
def test_the_text_read_in_chunks_is_marked_as_the_whole(cuts: list[int]) -> None:
    """The adapter reads the text 64 KiB at a time, and a chunk ends anywhere: in the
    headings, in a service's line, in a real server's, between two blocks."""
    services = [service(WEB, A, B), service(DNS6, RealServer("2001:db8::1", 53)), service(MARK)]
    services += [vs for vs in table(20)]
    text = with_counts(render(services), [(i, i * 7) for i in range(40)])
    at = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *at], [*at, len(text)], strict=True)]
    assert list(marks_of(c for c in chunks if c)) == block_marks(text)
    assert list(marks_of([render([])])) == []


_KEYS = st.one_of(
    st.builds(
        ServiceKey.inet,
        st.sampled_from(list(Protocol)),
        st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(
            lambda a: canonical_address(str(a))
        ),
        st.integers(0, 65535),
    ),
    st.builds(ServiceKey.mark, st.sampled_from(list(Family)), st.integers(1, 2**32 - 1)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYS, min_size=1, max_size=5, unique=True))
def test_a_changed_services_line_names_its_key(keys: list[ServiceKey]) -> None:
    """Whatever the protocol's name (SCTP's is four letters, TCP's three), the family, the
    address (IPv4-mapped, zero) or the mark: the text's line of a service begins
    with its key's prefix, and a changed line names the key back, as the kernel adapter
    reads it, so the service is read in full at the next resync."""
    text = render([service(key) for key in keys])
    prefixes = [prefix for prefix, _mark in block_marks(text)]
    assert prefixes == [prefix_of(key) for key in keys]
    named = changed_keys(prefixes)
    assert named is not None and set(keys) <= named
    assert len(named) <= 2 * len(keys)  # a firewall mark names its two families' keys
