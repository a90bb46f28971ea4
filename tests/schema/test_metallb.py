"""A way in from MetalLB (issue 18): its Service annotations honoured when the operator turns
them on (the whole director against the API stand-in), and its IPAddressPool objects, as
kubectl prints them, made into a pools: section the director loads."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from director.daemon.runtime import Runtime
from director.dataplane.fake import FakeIpvs
from director.schema.config import parse_config
from director.schema.metallb import convert
from lab.kubeapi import FakeApiServer, node, service
from lab.wait import eventually
from tests.kubelab import PORTS, settings


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.create("nodes", node("n1", "192.0.2.11"))
        yield server


def ingress(api: FakeApiServer, name: str) -> list[str]:
    status = api.get("services", name).get("status") or {}
    return [i.get("ip") for i in (status.get("loadBalancer") or {}).get("ingress", [])]


def start(api: FakeApiServer, tmp_path: Path, metallb: bool) -> Runtime:
    text = "  metallb_annotations: true" if metallb else ""
    runtime = Runtime(settings(api.kubeconfig(tmp_path / "kc"), kube_extra=text), FakeIpvs())
    runtime.start()
    assert runtime.wait_ready(20)
    return runtime


def test_metallb_annotations_are_honoured_when_turned_on_and_ignored_otherwise(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.create(
        "services",
        service("asks", PORTS, annotations={"metallb.io/loadBalancerIPs": "198.51.100.5"}),
    )
    api.create(
        "services",
        service(
            "old-form", PORTS, annotations={"metallb.universe.tf/loadBalancerIPs": "198.51.100.6"}
        ),
    )
    api.create(
        "services",
        service(
            "ours-win",
            PORTS,
            annotations={
                "lvs-director.io/load-balancer-ips": "198.51.100.7",
                "metallb.io/loadBalancerIPs": "198.51.100.3",
            },
        ),
    )
    shared = {"metallb.io/allow-shared-ip": "web"}
    api.create("services", service("share-a", [("http", "TCP", 80)], annotations=shared))
    api.create("services", service("share-b", [("https", "TCP", 443)], annotations=shared))
    with start(api, tmp_path, metallb=True):
        eventually(lambda: ingress(api, "asks") == ["198.51.100.5"], what="metallb.io/ IPs")
        eventually(lambda: ingress(api, "old-form") == ["198.51.100.6"], what="the old form")
        eventually(lambda: ingress(api, "ours-win") == ["198.51.100.7"], what="ours first")
        a = eventually(lambda: ingress(api, "share-a"), what="share-a addressed")
        assert eventually(lambda: ingress(api, "share-b"), what="share-b") == a, "one address"


def test_metallb_annotations_are_ignored_unless_turned_on(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.create(
        "services",
        service("asks", PORTS, annotations={"metallb.io/loadBalancerIPs": "198.51.100.5"}),
    )
    with start(api, tmp_path, metallb=False):
        got = eventually(lambda: ingress(api, "asks"), what="an address")
        assert got != ["198.51.100.5"] and got == ["198.51.100.0"]


# What `kubectl get ipaddresspools,l2advertisements,bgpadvertisements -n metallb-system
# -o yaml` prints (trimmed of nothing the converter may rely on: managedFields stay).
KUBECTL = """
apiVersion: v1
items:
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata:
    creationTimestamp: "2026-11-20T10:00:00Z"
    generation: 1
    managedFields:
    - apiVersion: metallb.io/v1beta1
      fieldsType: FieldsV1
      fieldsV1: {f:spec: {.: {}, f:addresses: {}}}
      manager: kubectl-client-side-apply
      operation: Update
    name: production
    namespace: metallb-system
    resourceVersion: "1234"
    uid: 7c3a2a4e-0000-4000-8000-000000000001
  spec:
    addresses: [198.51.100.0/26, "198.51.100.200-198.51.100.210", "2001:db8:1::/120"]
    autoAssign: true
    avoidBuggyIPs: false
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata: {name: edge.bgp, namespace: metallb-system}
  spec:
    addresses: [203.0.113.0/27]
    autoAssign: false
    avoidBuggyIPs: true
    serviceAllocation: {priority: 50, namespaces: [shop]}
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata: {name: broken, namespace: metallb-system}
  spec:
    addresses: [127.0.0.0/30]
- apiVersion: metallb.io/v1beta1
  kind: L2Advertisement
  metadata: {name: l2, namespace: metallb-system}
  spec:
    ipAddressPools: [production]
- apiVersion: metallb.io/v1beta1
  kind: BGPAdvertisement
  metadata: {name: edge, namespace: metallb-system}
  spec:
    ipAddressPools: [edge.bgp]
    communities: ["64512:10", "no-export", "my-named-community", "large:64512:1:4294967295"]
    localPref: 200
    aggregationLength: 32
kind: List
metadata:
  resourceVersion: ""
"""


def test_metallb_pools_become_a_pools_section_the_director_loads(tmp_path: Path) -> None:
    converted = convert(KUBECTL)
    text = converted.text("metallb.yaml")
    by_name = {p["name"]: p for p in converted.pools}
    assert set(by_name) == {"production", "edge-bgp"}, "the refused pool is left out"
    assert by_name["production"] == {
        "name": "production",
        "addresses": ["198.51.100.0/26", "198.51.100.200-198.51.100.210", "2001:db8:1::/120"],
        "all_addresses": True,  # MetalLB gives out network and broadcast addresses too
    }
    assert by_name["edge-bgp"] == {
        "name": "edge-bgp",
        "addresses": ["203.0.113.0/27"],
        "auto_assign": False,
        "announce": "bgp",
        "communities": ["64512:10", "no-export"],
        "large_communities": ["64512:1:4294967295"],
        "local_preference": 200,
        "allocate_to": {"priority": 50, "namespaces": ["shop"]},
    }
    notes = "\n".join(converted.notes)
    for said in (
        "edge.bgp is named edge-bgp",
        "avoidBuggyIPs",
        "'my-named-community'",
        "aggregationLength",
        "pool broken:",
    ):
        assert said in notes, said
    bgp = "bgp: {asn: 64512, router_id: 198.18.0.11, peers: [{address: 198.18.0.1, asn: 64500}]}"
    settings = parse_config(f"{text}{bgp}\n", "converted.yaml")  # what the director loads
    assert [p.name for p in settings.pools] == ["production", "edge-bgp"]
    assert settings.pools[1].allocation.namespaces == {"shop"}
    assert all(line.startswith("# ") for line in text.splitlines() if "note" in line)


def test_the_command_converts_a_file_and_refuses_what_is_not_metallb(tmp_path: Path) -> None:
    source = tmp_path / "metallb.yaml"
    source.write_text(KUBECTL)
    done = subprocess.run(
        [sys.executable, "-m", "director", "metallb-pools", str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "  - name: edge-bgp" in done.stdout and "# note: " in done.stdout
    source.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    done = subprocess.run(
        [sys.executable, "-m", "director", "metallb-pools", str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no IPAddressPool" in done.stdout
    source.write_text("a: [unclosed\n")
    done = subprocess.run(
        [sys.executable, "-m", "director", "metallb-pools", str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "not YAML" in done.stderr


def pool_doc(name: str, addresses: list[str]) -> str:
    listed = ", ".join(addresses)
    return (
        f"- apiVersion: metallb.io/v1beta1\n  kind: IPAddressPool\n  metadata: {{name: {name}, "
        f"namespace: metallb-system}}\n  spec: {{addresses: [{listed}]}}\n"
    )


def test_what_metallb_allows_and_the_director_does_not_is_carried_over_or_said() -> None:
    """A renamed pool never takes a real one's name; overlapping pools (legal in MetalLB)
    come out apart; a localPref that is not a number is said and left out, the rest
    converted. The output is a pools: section director check accepts."""
    bgp_advert = (
        "- apiVersion: metallb.io/v1beta1\n  kind: BGPAdvertisement\n  metadata: {{name: {name}}}"
        "\n  spec: {{ipAddressPools: [{pool}], localPref: {pref}}}\n"
    )
    text = (
        "items:\n"
        + pool_doc("P.One", ["198.51.100.0/28"])
        + pool_doc("p-one", ["198.51.100.16/28"])
        + pool_doc("wide", ["198.51.100.32/28"])
        + pool_doc("part", ["198.51.100.40-198.51.100.55"])
        + pool_doc("inside", ["198.51.100.36/30"])
        + bgp_advert.format(name="a1", pool="p-one", pref="[1, 2]")
        + bgp_advert.format(name="a2", pool="wide", pref='"high"')
        + "kind: List\n"
    )
    converted = convert(text)
    by_name = {p["name"]: p for p in converted.pools}
    assert by_name["p-one"]["addresses"] == ["198.51.100.16/28"], "the real p-one keeps it"
    assert by_name["p-one-2"]["addresses"] == ["198.51.100.0/28"]
    assert by_name["part"]["addresses"] == ["198.51.100.48-198.51.100.55"]
    assert "inside" not in by_name and "local_preference" not in by_name["wide"]
    notes = "\n".join(converted.notes)
    for said in (
        "P.One is named p-one-2 here",
        "localPref [1, 2]",
        "localPref 'high'",
        "pool inside: every address is also in a pool before it",
    ):
        assert said in notes, notes
    bgp = "bgp: {asn: 64512, router_id: 198.18.0.11, peers: [{address: 198.18.0.1, asn: 64500}]}"
    settings = parse_config(converted.text("m.yaml") + bgp + "\n", "converted.yaml")
    assert sorted(p.name for p in settings.pools) == ["p-one", "p-one-2", "part", "wide"]


def test_service_allocation_carries_over_and_never_serves_more_than_in_metallb() -> None:
    """serviceAllocation becomes allocate_to (priority, namespaces, Service selectors);
    namespaceSelectors have no counterpart: the pool then serves only its listed namespaces,
    or, with none listed, only Services that name it."""

    def pool(name: str, allocation: str) -> str:
        return (
            f"apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: "
            f"{{name: {name}}}\nspec:\n  addresses: [{POOLS[name]}]\n"
            f"  serviceAllocation: {allocation}\n"
        )

    text = "---\n".join(
        [
            pool(
                "web",
                "{priority: 10, serviceSelectors: [{matchLabels: {tier: web}, "
                "matchExpressions: [{key: env, operator: NotIn, values: [dev]}]}]}",
            ),
            pool("teams", "{namespaces: [a], namespaceSelectors: [{matchLabels: {team: x}}]}"),
            pool("selected", "{namespaceSelectors: [{matchLabels: {team: y}}]}"),
        ]
    )
    converted = convert(text)
    by_name = {p["name"]: p for p in converted.pools}
    assert by_name["web"]["allocate_to"] == {
        "priority": 10,
        "service_selectors": [
            {
                "match_labels": {"tier": "web"},
                "match_expressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}],
            }
        ],
    }
    assert by_name["teams"]["allocate_to"] == {"namespaces": ["a"]}
    assert by_name["selected"].get("auto_assign") is False
    assert sum("namespaceSelectors are not carried over" in n for n in converted.notes) == 2
    settings = parse_config(converted.text("metallb.yaml"), "converted.yaml")
    web = next(p for p in settings.pools if p.name == "web")
    assert web.allocation.admits("shop", {"tier": "web", "env": "prod"})
    assert not web.allocation.admits("shop", {"tier": "web", "env": "dev"})


POOLS = {"web": "198.51.100.0/28", "teams": "198.51.100.16/28", "selected": "198.51.100.32/28"}
