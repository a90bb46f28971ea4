"""The parts ``director run`` is made of, chosen from the file: the kernel's parameters full
NAT, BGP and conntrackd need (and none beside the fake: the host is not touched), the
firewall, and what a scrape reads of daemons not made yet."""

from __future__ import annotations

from typing import cast

from director.core.firewall import FakeFirewall
from director.core.owned import Ledger
from director.daemon import wiring
from director.dataplane.fake import FakeIpvs
from director.dataplane.interface import Ipvs
from director.schema.config import parse_config

OWN = "ownership: {networks: [192.0.2.0/24, 10.0.0.0/8]}\n"
SNAT = "snat: {addresses: [10.0.0.254]}\n"
BGP = (
    "bgp:\n  asn: 64512\n  router_id: 198.18.0.11\n  peers:\n"
    "    - {address: 198.18.0.1, asn: 64500, source: 198.18.0.11}\n"
)


class Kernel:
    """Stands in for the kernel's adapter (not the fake): in namespace ``lab-d1``."""

    netns = "lab-d1"


def wanted(text: str, ipvs: object = None) -> dict[str, str] | None:
    settings = parse_config(OWN + text, "d.yaml")
    keeper = wiring.kernel_settings(
        settings, cast(Ipvs, ipvs or Kernel()), None, dry_run=False, ledger=Ledger()
    )
    if keeper is None:
        return None
    assert keeper.netns == "lab-d1"
    return dict(keeper.values)


def test_the_kernel_s_parameters_follow_what_the_file_asks_for() -> None:
    """expire_nodest_conn on every box (issue 71, 5: only the role set it, and a box set up
    by hand left clients hanging after a drain); the rest as the file asks."""
    nodest = {"net.ipv4.vs.expire_nodest_conn": "1"}
    off = "guard: {syn: off}\n"
    assert wanted(off) == nodest
    assert wanted(SNAT + off) == {**nodest, "net.ipv4.vs.conntrack": "1"}
    assert wanted(BGP) == {**nodest, "net.ipv4.vs.sloppy_tcp": "1", "net.ipv4.vs.sloppy_sctp": "1"}
    # the SYN guard (a box on its own guards by default): every connection tracked, and
    # the cookie's ACK left "invalid" for synproxy
    guarded = {"net.ipv4.vs.conntrack": "1", "net.netfilter.nf_conntrack_tcp_loose": "0"}
    assert wanted("") == {**nodest, **guarded}
    assert wanted(SNAT, FakeIpvs()) is None  # the fake: the host's kernel is not touched


def test_beside_the_fake_the_firewall_is_the_fake_too() -> None:
    settings = parse_config(OWN + SNAT, "d.yaml")
    assert isinstance(wiring.firewall(FakeIpvs(), None, settings, dry_run=False), FakeFirewall)


def test_a_scrape_before_the_daemons_are_made_reads_nothing() -> None:
    assert wiring.peers(None) == ()
    assert wiring.frr_figures(None) is None
    assert wiring.conntrack(None) is None
    assert wiring.keepalived_counts(None) is None
    none = wiring.Daemons(None, None, None)
    assert wiring.keepalived_counts(none) is None and wiring.conntrack(none) is None


def test_kubeconfig_on_the_command_line_is_refused_with_several_clusters() -> None:
    """`director run --kubeconfig` stands for kubernetes.kubeconfig: with clusters: it could
    only be a mistake (which cluster?), so the start is refused, not the flag ignored."""
    import pytest

    from director.daemon.wiring import clusters
    from director.schema.config import parse_config

    settings = parse_config(
        "pools: [{name: p, addresses: [198.51.100.0/28]}]\n"
        "clusters: [{name: a, kubeconfig: /k/a, pools: [p]}]\n"
    )
    with pytest.raises(ValueError, match="each cluster names its own kubeconfig"):
        clusters(settings, "/elsewhere")
