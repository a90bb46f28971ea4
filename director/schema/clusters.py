"""The rule of ``clusters:``: several clusters served by one director, none able to take
another's addresses or ports (run by :func:`director.schema.rules.compile_document`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from director.schema.document import Document
from director.schema.static import Refusal

if TYPE_CHECKING:
    from director.core.pools import Pool


class Compiling(Protocol):
    """What the rule reads of the file as compiled so far."""

    @property
    def doc(self) -> Document: ...

    @property
    def pools(self) -> list[Pool]: ...


def clusters_apart(c: Compiling) -> None:
    """``clusters:`` entries are distinct clusters, each with pools to draw from, none able
    to take another's addresses: unique names and kubeconfigs, pools that exist, NodePort
    VIPs of their own. ``kubernetes:`` is the one-cluster form: not both."""
    doc = c.doc
    if not doc.clusters:
        return
    if doc.kubernetes is not None:
        raise Refusal(
            ("clusters",),
            "kubernetes: and clusters: together: kubernetes: is the one-cluster form; "
            "move it into clusters: with a name",
        )
    if not c.pools:
        raise Refusal(
            ("clusters",), "serving Kubernetes Services needs at least one address pool (pools:)"
        )
    names: dict[str, int] = {}
    configs: dict[str | None, int] = {}
    vips: dict[str, int] = {}
    known = {pool.name for pool in c.pools}
    listed = {name for cluster in doc.clusters for name in cluster.pools}
    for index, cluster in enumerate(doc.clusters):
        here = ("clusters", index)
        if cluster.name in names:
            raise Refusal(
                (*here, "name"),
                f"cluster {cluster.name!r} is declared twice (first on line {{first}})",
                ("clusters", names[cluster.name]),
            )
        names[cluster.name] = index
        if cluster.kubeconfig in configs:
            first = doc.clusters[configs[cluster.kubeconfig]].name
            what = cluster.kubeconfig or "the pod's service account (no kubeconfig)"
            raise Refusal(
                (*here, "kubeconfig"),
                f"{what} is also cluster {first!r}'s: two entries for one cluster would "
                "fight over its Services",
            )
        configs[cluster.kubeconfig] = index
        for at, vip in enumerate(cluster.nodeport_vips):
            if vip in vips:
                first = doc.clusters[vips[vip]].name
                raise Refusal(
                    (*here, "nodeport_vip", at),
                    f"{vip} is cluster {first!r}'s NodePort VIP: node ports of two clusters "
                    "would collide on it",
                )
            vips[vip] = index
        for at, name in enumerate(cluster.pools):
            if name not in known:
                raise Refusal(
                    (*here, "pools", at),
                    f"pool {name!r} does not exist (pools: {', '.join(sorted(known)) or 'none'})",
                )
        if not cluster.pools and not known - listed:
            raise Refusal(
                here,
                f"cluster {cluster.name!r} lists no pools, and every pool is another "
                "cluster's: list the pools it may draw from",
            )
