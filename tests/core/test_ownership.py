"""What the director owns: virtual services whose address is in one of its networks (of
that family) or whose fwmark is in one of its ranges. Anything else in the kernel is left
alone."""

from __future__ import annotations

import ipaddress

from director.core.model import Family, IpProtocol, ServiceKey
from director.core.ownership import Ownership

OWN = Ownership(
    (ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8:100::/64")),
    (range(100, 200),),
)


def test_an_address_is_owned_inside_a_network_of_its_family_only() -> None:
    tcp = IpProtocol.TCP
    assert OWN.owns(ServiceKey.inet(tcp, "198.51.100.255", 80))
    assert not OWN.owns(ServiceKey.inet(tcp, "198.51.101.0", 80))
    assert OWN.owns(ServiceKey.inet(tcp, "2001:db8:100::ffff", 443))
    assert not OWN.owns(ServiceKey.inet(tcp, "2001:db8:101::1", 443))
    # ::ffff:198.51.100.1 is an IPv6 address: the IPv4 network does not own it.
    assert not OWN.owns(ServiceKey.inet(tcp, "::ffff:198.51.100.1", 80))


def test_a_fwmark_is_owned_inside_a_range_and_described_as_the_operator_wrote_it() -> None:
    assert OWN.owns(ServiceKey.mark(Family.INET, 100))
    assert OWN.owns(ServiceKey.mark(Family.INET6, 199))
    assert not OWN.owns(ServiceKey.mark(Family.INET, 200))
    assert OWN.describe() == "198.51.100.0/24, 2001:db8:100::/64, fwmark 100-199"
    assert Ownership().describe() == "nothing"
    assert not Ownership().owns(ServiceKey.inet(IpProtocol.TCP, "198.51.100.1", 80))
