"""nft itself (in a user namespace) and the fake beside it, given the same cases: the filter
holds exactly what it was given, the table's fingerprint changes with the table and only
then, full NAT's rules held and read back as the filter's are."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from director.core.firewall import FakeFirewall
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
