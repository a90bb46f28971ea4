"""IPAM: requested addresses, sharing, dual-stack, restart safety. Table-tested."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings, strategies as st

from director.core.ipam import Allocator, Request
from director.core.pools import Pool

ip = ipaddress.ip_address
WEB = frozenset({("TCP", 80), ("TCP", 443)})
DNS = frozenset({("UDP", 53), ("TCP", 53)})


def pools() -> tuple[Pool, ...]:
    return (
        Pool.parse("default", ["198.51.100.0-198.51.100.3", "2001:db8:100::/126"]),
        Pool.parse("reserved", ["203.0.113.10-203.0.113.12"], auto_assign=False),
    )


def req(name: str, ports=WEB, versions=(4,), **kw) -> Request:  # type: ignore[no-untyped-def]
    return Request(name, versions, ports, **kw)


def test_auto_assigns_the_first_free_address_of_each_family() -> None:
    alloc = Allocator(pools())
    assert alloc.assign(req("a/one")).addresses == (ip("198.51.100.0"),)
    dual = alloc.assign(req("a/two", versions=(4, 6)))
    assert dual.addresses == (ip("198.51.100.1"), ip("2001:db8:100::"))
    assert dual.pool == "default"


def test_exhaustion_is_an_error_with_the_reason_and_holds_nothing() -> None:
    alloc = Allocator((Pool.parse("tiny", ["198.51.100.7/32"]),))
    assert alloc.assign(req("a/one")).ok
    out = alloc.assign(req("a/two"))
    assert not out.ok and "no free IPv4 address in pool(s) tiny" in str(out.error)
    assert alloc.held("a/two") == ()
    alloc.release("a/one")
    assert alloc.assign(req("a/two")).addresses == (ip("198.51.100.7"),)


def test_requested_address_must_be_in_a_pool_and_free() -> None:
    alloc = Allocator(pools())
    # A pool without auto-assign still serves explicit requests.
    assert alloc.assign(req("a/x", requested=(ip("203.0.113.11"),))).ok
    taken = alloc.assign(req("a/y", requested=(ip("203.0.113.11"),)))
    assert taken.error == "address 203.0.113.11 is already used by a/x"
    outside = alloc.assign(req("a/z", requested=(ip("192.0.2.1"),)))
    assert outside.error == "address 192.0.2.1 is outside any configured pool"


def test_named_pool_and_unknown_pool() -> None:
    alloc = Allocator(pools())
    assert alloc.assign(req("a/x", pool="reserved")).addresses == (ip("203.0.113.10"),)
    bad = alloc.assign(req("a/y", pool="nope"))
    assert bad.error == "pool 'nope' does not exist (pools: default, reserved)"


def test_sharing_needs_the_same_key_and_no_port_collision() -> None:
    alloc = Allocator(pools())
    first = alloc.assign(req("a/web", sharing_key="k1"))
    # Same key, other ports: shares the address.
    assert alloc.assign(req("a/dns", ports=DNS, sharing_key="k1")).addresses == first.addresses
    # Same key, colliding port: refused when asked for that address.
    clash = alloc.assign(req("a/web2", sharing_key="k1", requested=first.addresses))
    assert clash.error == "address 198.51.100.0 is shared with a/web, which already uses TCP/80"
    # Other key or no key: never shares.
    other = alloc.assign(req("a/x", ports=DNS, sharing_key="k2", requested=first.addresses))
    assert other.error == "address 198.51.100.0 is already used by a/web"


def test_restart_keeps_what_status_says_and_assigns_nothing_new() -> None:
    before = Allocator(pools())
    held = {name: before.assign(req(name)).addresses for name in ("a/1", "a/2", "a/3")}
    before.release("a/1")  # a hole at the start of the pool
    after = Allocator(pools())
    for name in ("a/2", "a/3"):
        assert after.assign(req(name), keep=held[name]).addresses == held[name]
    assert after.assign(req("a/new")).addresses == held["a/1"]


def test_stale_status_outside_the_pools_is_replaced() -> None:
    alloc = Allocator(pools())
    out = alloc.assign(req("a/x"), keep=(ip("192.0.2.99"),))
    assert out.addresses == (ip("198.51.100.0"),)


def test_a_request_changing_address_releases_the_old_one() -> None:
    alloc = Allocator(pools())
    alloc.assign(req("a/x", requested=(ip("198.51.100.2"),)))
    alloc.assign(req("a/x", requested=(ip("198.51.100.3"),)))
    assert alloc.assign(req("a/y", requested=(ip("198.51.100.2"),))).ok


def test_requested_family_must_be_one_the_service_has() -> None:
    alloc = Allocator(pools())
    out = alloc.assign(req("a/x", requested=(ip("2001:db8:100::1"),)))
    assert "ipFamilies do not include it" in str(out.error)


def test_ten_thousand_allocations_stay_fast_and_unique() -> None:
    alloc = Allocator((Pool.parse("big", ["10.0.0.0/16"]),))
    seen = {alloc.assign(req(f"ns/s{i}")).addresses[0] for i in range(10_000)}
    assert len(seen) == 10_000


def test_a_service_keeps_its_address_while_its_status_write_is_pending() -> None:
    alloc = Allocator(pools())
    first = alloc.assign(req("a/x")).addresses
    alloc.assign(req("a/y"))
    # Recomputed before the status write is visible (or while the API is down): same address.
    assert alloc.assign(req("a/x")).addresses == first


def test_reserved_addresses_are_never_given_out_nor_granted() -> None:
    """The NodePort VIP and static services' VIPs are the director's own (issue 13, item 24)."""
    from director.engine.loop import reserved_addresses
    from director.schema.config import parse_config

    settings = parse_config(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.1, port: 80},"
        " {name: far, address: 198.51.100.9, port: 80}]\n"
        "pools: [{name: p, addresses: [198.51.100.0-198.51.100.3]}]\n"
        "kubernetes: {nodeport_vip: 198.51.100.0}\n",
        "r.yaml",
    )
    alloc = Allocator(settings.pools, reserved_addresses(settings))
    assert [alloc.assign(req(f"a/{i}")).addresses for i in range(3)] == [
        (ip("198.51.100.2"),),
        (ip("198.51.100.3"),),
        (),
    ]
    asked = alloc.assign(req("a/x", requested=(ip("198.51.100.0"),)))
    assert asked.error == "address 198.51.100.0 is reserved for the NodePort VIP"
    asked = alloc.assign(req("a/y", requested=(ip("198.51.100.1"),)))
    assert asked.error == "address 198.51.100.1 is reserved for static service static/web"
    # A static VIP no pool holds is refused as outside the pools: nothing is kept for it.
    assert ip("198.51.100.9") not in reserved_addresses(settings)
    asked = alloc.assign(req("a/w", requested=(ip("198.51.100.9"),)))
    assert asked.error == "address 198.51.100.9 is outside pool 'p'"
    # What status says is not kept either when it names a reserved address.
    kept = Allocator(settings.pools, reserved_addresses(settings)).assign(
        req("a/z"), keep=(ip("198.51.100.1"),)
    )
    assert kept.addresses == (ip("198.51.100.2"),)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a/1", "a/2", "a/3", "a/4", "a/5"]),
            st.sampled_from(["auto", "dual", "shared", "reserved-pool", "release"]),
        ),
        max_size=40,
    )
)
def test_the_pool_use_graphed_is_what_is_held(steps: list[tuple[str, str]]) -> None:
    """``in_use_in`` (the pool gauges, the status page) is kept as addresses come and go:
    after any sequence it counts each address in use once, in its own pool."""
    alloc = Allocator(pools())
    for name, action in steps:
        if action == "release":
            alloc.release(name)
        elif action == "auto":
            alloc.assign(req(name))
        elif action == "dual":
            alloc.assign(req(name, versions=(4, 6)))
        elif action == "shared":
            alloc.assign(
                req(
                    name,
                    ports=frozenset({("UDP", hash(name) % 100 + 1)}),
                    sharing_key="k",
                    requested=(ip("198.51.100.3"),),
                )
            )
        else:
            alloc.assign(req(name, pool="reserved"))
    used = {a for name in ["a/1", "a/2", "a/3", "a/4", "a/5"] for a in alloc.held(name)}
    for pool in alloc.pools:
        assert alloc.in_use_in(pool) == sum(1 for a in used if pool.contains(a))


# -- allocate_to: which Services a pool serves, and its priority (MetalLB's serviceAllocation)
def limited() -> tuple[Pool, ...]:
    from director.core.pools import Allocation, LabelSelector

    web = LabelSelector((("tier", "web"),), (("example.com/exposed", "NotIn", ("no",)),))
    return (
        Pool.parse("fallback", ["198.51.100.0/30"], all_addresses=True),
        Pool.parse(
            "team-a",
            ["198.51.100.8/31"],
            all_addresses=True,
            allocation=Allocation(1, frozenset({"team-a"})),
        ),
        Pool.parse(
            "web",
            ["198.51.100.16/32"],
            all_addresses=True,
            allocation=Allocation(5, service_selectors=(web,)),
        ),
    )


def test_a_pool_limited_to_namespaces_serves_only_them_and_says_so() -> None:
    alloc = Allocator(limited())
    assert alloc.assign(req("team-a/one")).pool == "team-a", "its own pool first (priority 1)"
    assert alloc.assign(req("other/one")).pool == "fallback", "not team-a's"
    named = alloc.assign(req("other/two", pool="team-a"))
    assert named.error == ("pool 'team-a' serves only namespaces team-a, not other/two")
    asked = alloc.assign(req("other/three", requested=(ip("198.51.100.9"),)))
    assert asked.error == (
        "address 198.51.100.9: pool 'team-a' serves only namespaces team-a, not other/three"
    )
    assert alloc.assign(req("team-a/two", requested=(ip("198.51.100.9"),))).ok


def test_pools_are_tried_by_priority_then_those_without_one() -> None:
    alloc = Allocator(limited())
    got = [alloc.assign(req(f"team-a/s{i}")).pool for i in range(6)]
    assert got == ["team-a", "team-a", "fallback", "fallback", "fallback", "fallback"]
    labelled = {"tier": "web"}
    got = [alloc.assign(req(f"team-a/w{i}", labels=labelled)).pool for i in range(2)]
    assert got == ["web", None], "priority 5, then nothing left"


def test_a_pool_with_service_selectors_serves_the_labels_it_selects() -> None:
    alloc = Allocator(limited())
    assert alloc.assign(req("x/a", labels={"tier": "web"})).pool == "web"
    assert alloc.assign(req("x/b", labels={"tier": "db"})).pool == "fallback"
    opted_out = {"tier": "web", "example.com/exposed": "no"}
    assert alloc.assign(req("x/c", labels=opted_out)).pool == "fallback"


def test_a_service_that_leaves_a_pool_s_selection_gets_an_address_it_may_have() -> None:
    alloc = Allocator(limited())
    first = alloc.assign(req("x/a", labels={"tier": "web"}))
    assert first.addresses == (ip("198.51.100.16"),)
    moved = alloc.assign(req("x/a", labels={"tier": "db"}), keep=first.addresses)
    assert moved.pool == "fallback" and alloc.users(ip("198.51.100.16")) == ()


def test_no_pool_serving_a_service_is_an_error_naming_what_each_serves() -> None:
    from director.core.pools import Allocation

    only_a = Allocation(namespaces=frozenset({"a"}))
    alloc = Allocator((Pool.parse("a", ["198.51.100.0/30"], allocation=only_a),))
    out = alloc.assign(req("b/web"))
    assert out.error == "no pool with auto_assign serves b/web (allocate_to: a: namespaces a)"


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["team-a", "other"]),
            st.sampled_from([{}, {"tier": "web"}, {"tier": "db"}]),
        ),
        max_size=12,
    )
)
@settings(max_examples=60)
def test_no_service_ever_holds_an_address_of_a_pool_that_does_not_serve_it(
    asks: list[tuple[str, dict[str, str]]],
) -> None:
    pools = limited()
    alloc = Allocator(pools)
    for index, (namespace, labels) in enumerate(asks):
        request = req(f"{namespace}/s{index}", labels=labels)
        out = alloc.assign(request)
        for address in out.addresses:
            pool = alloc.pool_of(address)
            assert pool is not None and request.admitted(pool)
    held = [a for i in range(len(asks)) for a in alloc.held(f"{asks[i][0]}/s{i}")]
    assert len(held) == len(set(held)), "no address twice"


# -- several clusters (issue 37, item 2) ------------------------------------------------------
CLUSTER_POOLS = (
    Pool.parse("a-only", ["198.51.100.0-198.51.100.2"]),
    Pool.parse("shared", ["198.51.100.8-198.51.100.10"]),
    Pool.parse("b-only", ["198.51.100.16-198.51.100.18"]),
)
GIVEN = {"a": frozenset({"a-only", "shared"}), "b": frozenset({"b-only", "shared"})}
ADDRESSES = [ip(f"198.51.100.{n}") for n in (0, 1, 2, 8, 9, 10, 16, 17, 18, 30)]


def _cluster_request(
    cluster: str, index: int, requested: int | None, pool: str | None, sharing: bool
) -> Request:
    """What ipam_request makes of a Service of ``cluster`` (its pools, its sharing key)."""
    from director.core.annotations import ipam_request
    from director.core.cluster_parse import service_from_json
    from lab.kubeapi import service

    annotations = {}
    if requested is not None:
        annotations["lvs-director.io/load-balancer-ips"] = str(ADDRESSES[requested])
    if pool is not None:
        annotations["lvs-director.io/pool"] = pool
    if sharing:
        annotations["lvs-director.io/allow-shared-ip"] = "together"
    port = 80 + index  # distinct ports: Services with the same key may share
    obj = service(f"s{index}", [("p", "TCP", port)], annotations=annotations)
    obj["metadata"]["namespace"] = "default"  # type: ignore[index]
    made, problems = ipam_request(service_from_json(obj, cluster=cluster), pools=GIVEN[cluster])
    assert made is not None, problems
    return made


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.integers(0, 4),
            st.sampled_from(["assign", "assign", "release"]),
            st.one_of(st.none(), st.integers(0, len(ADDRESSES) - 1)),
            st.sampled_from([None, None, "a-only", "shared", "b-only", "nope"]),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_two_clusters_never_hold_one_address_nor_a_pool_not_given_to_them(
    steps: list[tuple[str, int, str, int | None, str | None, bool]],
) -> None:
    """Whatever Services of two clusters ask (requested addresses, pools, the same sharing
    key), an address is only ever held within one cluster, each from a pool given to it, and
    a request for another cluster's address is refused without taking it from the holder."""
    alloc = Allocator(CLUSTER_POOLS)
    for cluster, index, action, requested, pool, sharing in steps:
        name = f"{cluster}/default/s{index}"
        if action == "release":
            alloc.release(name)
            continue
        before = {a: alloc.users(a) for a in ADDRESSES}
        request = _cluster_request(cluster, index, requested, pool, sharing)
        assert request.name == name and request.cluster == cluster
        outcome = alloc.assign(request)
        if requested is not None and not outcome.ok:
            address = ADDRESSES[requested]
            others = [u for u in before[address] if u != name]
            assert [u for u in alloc.users(address) if u != name] == others
        for address in ADDRESSES:
            holders = alloc.users(address)
            assert len({h.split("/")[0] for h in holders}) <= 1, (address, holders)
            for holder in holders:
                home = alloc.pool_of(address)
                assert home is not None and home.name in GIVEN[holder.split("/")[0]]


def test_a_clash_between_clusters_is_refused_in_the_later_one_and_says_whose() -> None:
    alloc = Allocator(CLUSTER_POOLS)
    first = alloc.assign(_cluster_request("a", 0, 3, None, True))
    assert first.addresses == (ip("198.51.100.8"),)
    # the same address, the same sharing key, another port: within a cluster it would share
    later = alloc.assign(_cluster_request("b", 1, 3, None, True))
    assert not later.ok and later.error == "address 198.51.100.8 is already used by a/default/s0"
    assert alloc.users(ip("198.51.100.8")) == ("a/default/s0",)
    within = alloc.assign(_cluster_request("a", 1, 3, None, True))
    assert within.ok and alloc.users(ip("198.51.100.8")) == ("a/default/s0", "a/default/s1")


def test_a_pool_not_given_to_a_cluster_is_refused_by_name() -> None:
    alloc = Allocator(CLUSTER_POOLS)
    named = alloc.assign(_cluster_request("b", 0, None, "a-only", False))
    assert named.error == "pool 'a-only' is not given to cluster 'b'"
    asked = alloc.assign(_cluster_request("b", 0, 0, None, False))
    assert asked.error == "address 198.51.100.0: pool 'a-only' is not given to cluster 'b'"
    auto = alloc.assign(_cluster_request("b", 0, None, None, False))
    assert auto.ok and alloc.pool_of(auto.addresses[0]).name in GIVEN["b"]  # type: ignore[union-attr]


def test_a_service_whose_address_was_taken_gets_a_free_one_not_its_neighbour_s() -> None:
    """Issue 71, 4: a cluster added back, one of whose addresses another cluster took
    meanwhile: its Service took the next free address by the allocator's view, which was
    another of its Services' (status not read yet), and so on: 8 Services moved where one
    had to. Every address the cluster's statuses name is claimed first."""
    alloc = Allocator((Pool.parse("p", ["198.51.100.0-198.51.100.7"]),))
    assert alloc.assign(req("other/thief"), keep=[ip("198.51.100.0")]).ok
    statuses = {f"back/s{i}": ip(f"198.51.100.{i}") for i in range(4)}
    for name, address in statuses.items():
        alloc.claim(name, [address])
    got = {name: alloc.assign(req(name), keep=[a]).addresses[0] for name, a in statuses.items()}
    assert got["back/s0"] == ip("198.51.100.4"), "a free address, not s1's"
    assert [got[f"back/s{i}"] for i in (1, 2, 3)] == [statuses[f"back/s{i}"] for i in (1, 2, 3)]
    alloc.release("back/s3")  # a claim ends with its Service, assigned or not
    fresh = [alloc.assign(req(f"new/{n}")).addresses[0] for n in range(4)]
    assert fresh == [ip(f"198.51.100.{n}") for n in (5, 6, 7, 3)]
