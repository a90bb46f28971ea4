"""nft itself (in a user namespace) and the fake beside it, given the same cases: the filter
holds exactly what it was given, the table's fingerprint changes with the table and only
then, full NAT's rules and limits held and read back as the filter's are; and a client
over its rate dropped by real nftables while another is not."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from director.core.firewall import FakeFirewall
from director.core.model import IpProtocol as Protocol, RateLimit, ServiceKey
from director.dataplane.nft import NftFirewall
from lab.netns import Netns, connect_attempts
from tests.core.test_firewall import DNS6, SNAT_TO, WEB, flush_ruleset


# -- the kernel ----------------------------------------------------------------------------
@pytest.fixture(params=["fake", "nft"])
def firewall(request: pytest.FixtureRequest) -> Iterator[object]:
    """The conformance subject: the fake, and real nftables in a fresh network namespace
    (nftables works on this host's kernel; IPVS does not, so nothing else is needed)."""
    if request.param == "fake":
        yield FakeFirewall()
        return
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.skip("nftables needs root and nft")
    from director.dataplane.nft import NftFirewall

    yield NftFirewall(request.getfixturevalue("netns"))


def test_the_filter_holds_exactly_what_it_was_given(firewall) -> None:  # type: ignore[no-untyped-def]
    """Both subjects answer alike: what is filtered, drop counts from zero, nothing left
    behind when a service's filter goes, nothing in use once all are gone."""
    assert firewall.in_use() is False
    firewall.apply({WEB: ("10.0.0.0/8",), DNS6: ()})
    assert firewall.in_use() is True
    assert firewall.dropped() == {WEB: 0, DNS6: 0}
    firewall.apply({WEB: ("10.0.0.0/8", "192.168.0.0/16")})
    assert firewall.dropped() == {WEB: 0}
    firewall.apply({})
    assert firewall.in_use() is False and firewall.dropped() == {}


def test_the_tables_fingerprint_changes_with_the_table_and_only_then(firewall) -> None:  # type: ignore[no-untyped-def]
    """What the loop's read-back relies on, on both subjects: no table reads "", a table
    reads the same until someone changes it, a flush shows, and so does a change of the
    allowed ranges; the fake is never kinder than nft."""
    assert firewall.fingerprint() == ""
    firewall.apply({WEB: ("10.0.0.0/8",), DNS6: ()})
    first = firewall.fingerprint()
    assert first and firewall.fingerprint() == first
    firewall.apply({WEB: ("10.0.0.0/8",), DNS6: ()})
    assert firewall.fingerprint() == first, "the same rules written again read the same"
    firewall.apply({WEB: ("10.0.0.0/8", "192.168.0.0/16"), DNS6: ()})
    second = firewall.fingerprint()
    assert second not in ("", first)
    flush_ruleset(firewall)
    assert firewall.fingerprint() == "" and firewall.in_use() is False
    firewall.apply({WEB: ("10.0.0.0/8",), DNS6: ()})
    assert firewall.fingerprint() not in ("", second)
    flush_ruleset(firewall)  # behind its back, right after a read-back: written all the same
    firewall.apply({WEB: ("10.0.0.0/8",)})
    assert firewall.in_use() and firewall.dropped() == {WEB: 0}


def test_full_nat_is_held_and_read_back_as_the_filter_is(firewall) -> None:  # type: ignore[no-untyped-def]
    """On both subjects: full NAT in use while a service needs it, in the fingerprint
    (someone flushing the ruleset is seen), and gone when no service needs it."""
    from director.dataplane.nft import NftFirewall

    if isinstance(firewall, NftFirewall):
        firewall.snat_to = dict(SNAT_TO)  # what director run gives it from snat.addresses
    firewall.apply({}, frozenset({WEB}))
    assert firewall.in_use()
    first = firewall.fingerprint()
    firewall.apply({}, frozenset({WEB, DNS6}))
    assert firewall.fingerprint() not in ("", first)
    flush_ruleset(firewall)
    assert firewall.fingerprint() == "" and not firewall.in_use()
    firewall.apply({WEB: ("10.0.0.0/8",)}, frozenset({WEB}))
    assert firewall.in_use() and firewall.dropped() == {WEB: 0}
    firewall.apply({}, frozenset())
    assert not firewall.in_use()


def test_limits_are_held_and_read_back_as_the_filter_is(firewall) -> None:  # type: ignore[no-untyped-def]
    """On both subjects: a limited service is in use and counted from zero, a changed rate
    is a changed table (the fingerprint), a UDP service takes no rate (nothing to count),
    and the limits go when no service has one."""
    firewall.apply({}, limits={WEB: RateLimit(client=5), DNS6: RateLimit(service=9)})
    assert firewall.in_use() and firewall.limited() == {WEB: (0, 0)}
    first = firewall.fingerprint()
    assert first and firewall.fingerprint() == first
    firewall.apply({WEB: ("10.0.0.0/8",)}, limits={WEB: RateLimit(client=5, service=50)})
    assert firewall.fingerprint() not in ("", first)
    # a changed rate: a new meter and limit in the same transaction, the old ones deleted
    firewall.apply({WEB: ("10.0.0.0/8",)}, limits={WEB: RateLimit(client=7, service=60)})
    if isinstance(firewall, NftFirewall):
        held = firewall.fingerprint() and _listed(firewall)
        assert "client4_tcp_198_51_100_1_80_7 " in held and "_80_5 " not in held, held
        assert "rate4_tcp_198_51_100_1_80_60 " in held and "_80_50 " not in held, held
    assert firewall.limited() == {WEB: (0, 0)} and firewall.dropped() == {WEB: 0}
    firewall.apply({})
    assert not firewall.in_use() and firewall.limited() == {}


def _listed(firewall: NftFirewall) -> str:
    assert firewall.netns is not None
    return subprocess.run(
        ["ip", "netns", "exec", firewall.netns, "nft", "list", "table", "inet", "director"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture
def client_and_box() -> Iterator[tuple[Netns, Netns]]:
    """A box (10.9.1.1, nothing listening: a SYN that passes is answered with a reset) and
    a client namespace with two addresses, 10.9.1.2 and 10.9.1.3."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.skip("nftables needs root and nft")
    tag = os.getpid()
    box, client = Netns(f"limb{tag}"), Netns(f"limc{tag}")
    try:
        box.exec(
            ["ip", "link", "add", "c", "type", "veth", "peer", "name", "c", "netns", client.name]
        )
        box.ip("link set lo up", "addr add 10.9.1.1/24 dev c", "link set c up")
        client.ip("link set lo up", "addr add 10.9.1.2/24 dev c", "addr add 10.9.1.3/24 dev c")
        client.ip("link set c up")
        yield client, box
    finally:
        client.close()
        box.close()


def test_a_client_over_its_rate_is_dropped_and_counted_and_others_are_not(
    client_and_box: tuple[Netns, Netns],
) -> None:
    """Real nftables, real SYNs: 40 attempts at once from one address get the burst (5)
    through and the rest dropped, not reset, and counted; another address right after gets
    all of its own through. A service's rate caps both addresses together; and the
    clients the meter holds do not read as a changed table."""
    client, box = client_and_box
    web = ServiceKey.inet(Protocol.TCP, "10.9.1.1", 80)
    nft = NftFirewall(box.name)
    nft.apply({}, limits={web: RateLimit(client=5)})
    held = nft.fingerprint()
    greedy, took = connect_attempts(client, "10.9.1.1", 80, "10.9.1.2", 40)
    assert 5 <= greedy <= 5 + 5 * took + 1, (greedy, took)  # the burst, and the refill
    assert (
        connect_attempts(client, "10.9.1.1", 80, "10.9.1.3", 5)[0] == 5
    )  # not slowed by the other's excess
    assert nft.limited() == {web: (40 - greedy, 0)}
    assert nft.fingerprint() == held, "the meter's clients are traffic, not drift"
    nft.apply({}, limits={web: RateLimit(service=10)})
    time.sleep(1.1)  # a full bucket
    (first, took), (second, took_too) = (
        connect_attempts(client, "10.9.1.1", 80, "10.9.1.2", 15),
        connect_attempts(client, "10.9.1.1", 80, "10.9.1.3", 15),
    )
    both = first + second
    assert 10 <= both <= 10 + 10 * (took + took_too) + 1, (both, took, took_too)
    assert nft.limited() == {web: (40 - greedy, 30 - both)}  # the counters kept counting
