"""A Service's options: its annotations under the director's policy, each refused on its own
with a reason, the last valid value kept."""

from __future__ import annotations

from dataclasses import replace

from director.core.model import Forwarding
from director.core.policy import defaults, options
from tests.core.test_translate import POLICY, svc


def test_a_service_over_bgp_defaults_to_maglev_and_tun_and_a_pool_s_forwarding_counts() -> None:
    assert (defaults(POLICY, bgp=False).scheduler, defaults(POLICY, bgp=False).forwarding) == (
        "wlc",
        Forwarding.NAT,
    )
    over_bgp = defaults(POLICY, bgp=True)
    assert (over_bgp.scheduler, over_bgp.flags, over_bgp.forwarding) == (
        "mh",
        {"mh-port", "mh-fallback"},
        Forwarding.TUN,
    )
    assert defaults(POLICY, bgp=True, pool_forwarding=Forwarding.DR).forwarding is Forwarding.DR
    no_mh = replace(POLICY, schedulers=frozenset({"wlc", "rr"}))
    assert defaults(no_mh, bgp=True).scheduler == "wlc"


def test_each_bad_annotation_is_refused_on_its_own_and_the_last_valid_value_is_kept() -> None:
    good, problems = options(svc(annotations={"lvs-director.io/scheduler": "rr"}), POLICY, None)
    assert problems == [] and good.scheduler == "rr" and good.scheduler_source == "annotation"
    bad = svc(
        annotations={
            "lvs-director.io/scheduler": "rr",
            "lvs-director.io/forwarding": "magic",
            "lvs-director.io/local-weights": "sometimes",
        }
    )
    kept, problems = options(bad, POLICY, good)
    assert kept.scheduler == "rr" and kept.forwarding is good.forwarding
    assert kept.local_weights is good.local_weights
    assert sorted(p.annotation for p in problems) == [
        "lvs-director.io/forwarding",
        "lvs-director.io/local-weights",
    ]
