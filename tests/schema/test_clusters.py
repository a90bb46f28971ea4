"""``clusters:``: several clusters served by one director, each with its own pools, NodePort
VIP and credentials; what would let one take another's addresses is refused at load, with
the line and the reason (issue 37, item 1)."""

from __future__ import annotations

import pytest

from director.schema.config import ConfigError, parse_config

POOLS = (
    "pools:\n"
    "  - {name: prod, addresses: [198.51.100.0/28]}\n"
    "  - {name: shared, addresses: [198.51.100.16/28]}\n"
)


def _clusters(*entries: str) -> str:
    return POOLS + "clusters:\n" + "".join(f"  - {{{entry}}}\n" for entry in entries)


def test_clusters_each_serve_their_own_pools_and_vips() -> None:
    settings = parse_config(
        _clusters(
            "name: prod, kubeconfig: /k/prod, pools: [prod, shared], nodeport_vip: 192.0.2.10",
            "name: staging, kubeconfig: /k/staging, pools: [shared], identity: edge-1",
        ),
        "multi.yaml",
    )
    assert [k.cluster for k in settings.served] == ["prod", "staging"]
    assert settings.kubernetes is None and settings.in_cluster
    prod, staging = settings.served
    assert prod.nodeport_vips == ("192.0.2.10",) and staging.identity == "edge-1"
    # the NodePort VIP is the director's own address, as with kubernetes:
    assert any(str(net) == "192.0.2.10/32" for net in settings.ownership.networks)


@pytest.mark.parametrize(
    ("entries", "where", "reason"),
    [
        (
            ("name: a, kubeconfig: /k/a", "name: a, kubeconfig: /k/b"),
            "clusters[1].name",
            "cluster 'a' is declared twice (first on line 5)",
        ),
        (
            ("name: a, kubeconfig: /k/a", "name: b, kubeconfig: /k/a"),
            "clusters[1].kubeconfig",
            "/k/a is also cluster 'a''s: two entries for one cluster would fight",
        ),
        (
            ("name: a", "name: b"),
            "clusters[1].kubeconfig",
            "the pod's service account (no kubeconfig) is also cluster 'a''s",
        ),
        (
            (
                "name: a, kubeconfig: /k/a, nodeport_vip: 192.0.2.10",
                "name: b, kubeconfig: /k/b, nodeport_vip: 192.0.2.10",
            ),
            "clusters[1].nodeport_vip[0]",
            "192.0.2.10 is cluster 'a''s NodePort VIP",
        ),
        (
            ("name: a, kubeconfig: /k/a, pools: [prod, nope]",),
            "clusters[0].pools[1]",
            "pool 'nope' does not exist (pools: prod, shared)",
        ),
        (
            ("name: a, kubeconfig: /k/a, pools: [prod, shared]", "name: b, kubeconfig: /k/b"),
            "clusters[1]",
            "cluster 'b' lists no pools, and every pool is another cluster's",
        ),
        (("name: Prod, kubeconfig: /k/a",), "clusters[0].name", "must be a DNS label"),
        (("kubeconfig: /k/a",), "clusters[0]", "name"),
    ],
)
def test_clusters_that_would_take_from_each_other_are_refused_with_the_line(
    entries: tuple[str, ...], where: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_clusters(*entries), "multi.yaml")
    assert caught.value.where == where, caught.value
    assert reason in caught.value.reason
    assert caught.value.line >= 5  # the entry's own line, past the pools


def test_kubernetes_and_clusters_together_are_refused() -> None:
    text = _clusters("name: a, kubeconfig: /k/a") + "kubernetes: {kubeconfig: /k/b}\n"
    with pytest.raises(ConfigError, match="kubernetes: is the one-cluster form"):
        parse_config(text, "multi.yaml")


def test_clusters_need_a_pool() -> None:
    with pytest.raises(ConfigError, match="at least one address pool"):
        parse_config("clusters:\n  - {name: a, kubeconfig: /k/a}\n", "multi.yaml")


def test_a_clusters_kubeconfig_is_never_a_file_the_director_writes() -> None:
    text = _clusters("name: a, kubeconfig: /var/lib/director/intents.json") + (
        "api: {token_file: /etc/director/token}\n"
    )
    with pytest.raises(ConfigError, match=r"clusters\.0\.kubeconfig"):
        parse_config(text, "multi.yaml")


def test_the_worked_example_of_the_docs_loads() -> None:
    """docs/clusters.md's example is a file the director takes."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "clusters.md").read_text()
    example = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    settings = parse_config(example, "clusters.md")
    prod, staging = settings.served
    assert (prod.cluster, staging.cluster) == ("prod", "staging")
    assert staging.load_balancer_class == "example.com/edge"
