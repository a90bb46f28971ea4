"""What a list process sends the director: the objects come out equal to what the child
parsed, sharing their strings as an in-process parse does; a first list comes out whole, and
a later one as the changes that make the director's copy that list (what the director holds
at the version listed is not parsed, nor sent)."""

from __future__ import annotations

import os
import pickle
import socket
import sys
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from director.adapters.kube.wire import (
    PART,
    Broken,
    Held,
    Listing,
    compact,
    dumps,
    loads,
    read_frame,
)
from director.core.cluster import NodeInfo, ServiceInfo, SliceInfo
from director.core.cluster_parse import node_from_json, service_from_json, slice_from_json
from lab.kubeapi import endpoint_slice, node, service

NAMES = st.sampled_from(["web", "api", "db", "cache", "queue", "auth"])
PORTS = st.lists(
    st.tuples(st.sampled_from(["http", "https", "dns"]), st.just("TCP"), st.integers(1, 65535)),
    min_size=1,
    max_size=3,
    unique_by=lambda p: p[0],
)


@st.composite
def services(draw: st.DrawFn, cluster: str = "c") -> ServiceInfo:
    obj = service(
        draw(NAMES),
        draw(PORTS),
        annotations=draw(
            st.dictionaries(
                st.sampled_from(["lvs-director.io/scheduler", "lvs-director.io/weight"]),
                st.sampled_from(["rr", "sh", "5"]),
            )
        ),
        etp=draw(st.sampled_from([None, "Local"])),
    )
    obj["metadata"]["labels"] = draw(st.dictionaries(st.sampled_from(["app", "tier"]), NAMES))
    obj["metadata"]["creationTimestamp"] = "2026-12-03T10:00:00Z"
    return service_from_json(obj, cluster=cluster)


@st.composite
def slices(draw: st.DrawFn, cluster: str = "c") -> SliceInfo:
    endpoints = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.1.7"]),
                st.sampled_from([None, "n1", "n2"]),
                st.booleans(),
                st.booleans(),
            ),
            max_size=4,
        )
    )
    obj = endpoint_slice(draw(NAMES), endpoints, draw(PORTS), name=f"{draw(NAMES)}-x")
    return slice_from_json(obj, cluster=cluster)


@st.composite
def nodes(draw: st.DrawFn, cluster: str = "c") -> NodeInfo:
    return node_from_json(
        node(
            draw(NAMES),
            draw(st.sampled_from(["192.0.2.1", "192.0.2.2"])),
            ready=draw(st.booleans()),
        ),
        cluster=cluster,
    )


OBJECTS = st.one_of(services(), slices(), nodes())


def _through(info: Any) -> Any:
    """``info`` as the director gets it from a list process: packed, pickled, read back."""
    sent: list[Any] = []
    listing = Listing({}, sent.append)
    listing.take({"metadata": {"namespace": "default", "name": "x"}}, lambda _obj: info)
    listing.done("7")
    held = Held()
    ((handed_kind, handed),) = held.listed(held.decode(sent[0][1]), [])
    assert handed_kind == "RELIST"
    return handed[0]


@settings(max_examples=60, deadline=None)
@given(OBJECTS)
def test_an_object_arrives_equal_sharing_its_strings_as_a_parse_does(info: Any) -> None:
    got = _through(info)
    assert got == info and type(got) is type(info)
    assert got.cluster is sys.intern("c")
    if isinstance(got, ServiceInfo):
        assert got.ref is sys.intern(got.ref), "one string for the Service's key everywhere"
        assert dict(got.labels) == dict(info.labels)
    if isinstance(got, SliceInfo) and got.service:
        assert got.service is sys.intern(got.service), "shared with its Service's ref"


def _known(held: Held) -> dict[str, int | str]:
    """What the director hands a list process, as one mapping."""
    return {ident: version for part in held.known_parts() for ident, version in part.items()}


def _parse(obj: Any) -> ServiceInfo:
    return service_from_json(obj, cluster="c")


# A cluster's history: writes and deletions (each seen by the director's watch, or missed:
# a watch cut before it came) and lists (the first, then relists after 410 Gone).
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("WRITE"), NAMES, st.sampled_from(["rr", "sh", "wlc"]), st.booleans()),
        st.tuples(st.just("DELETE"), NAMES, st.just(""), st.booleans()),
        st.tuples(st.just("LIST"), st.just(""), st.just(""), st.just(False)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=100, deadline=None)
@given(STEPS)
def test_a_relist_leaves_the_directors_copy_as_the_list_sending_only_changes(
    steps: list[tuple[str, str, str, bool]],
) -> None:
    api: dict[str, dict[str, Any]] = {}  # name -> the object as the API server holds it
    version = 0
    held = Held()
    copy: dict[str, ServiceInfo] | None = None  # the director's, as its snapshot takes events
    at: dict[str, str] = {}  # the version of each object the director last saw
    for kind, name, scheduler, watched in steps:
        if kind == "LIST":
            sent: list[Any] = []
            listing = Listing(_known(held), sent.append)
            for obj in api.values():
                listing.take(obj, _parse)
            listing.done(str(version))
            *parts, (done, _, gone) = sent
            assert done == "DONE" and all(part[0] == "PART" for part in parts)
            objects = [item for part in parts for item in part[1]]
            stale = {n for n, obj in api.items() if at.get(n) != obj["metadata"]["resourceVersion"]}
            if copy is not None:  # only what the director does not hold as it is
                assert sorted(ident.split("/")[1] for ident, _, _ in objects) == sorted(stale)
            for handed_kind, handed in held.listed(held.decode(objects), gone):
                if handed_kind == "RELIST":
                    assert copy is None, "whole, the first time only"
                    copy = {info.ref: info for info in handed}
                elif handed_kind == "DELETED":
                    assert copy is not None
                    del copy[handed.ref]
                else:
                    assert copy is not None
                    copy[handed.ref] = handed
            assert copy == {f"c/default/{n}": _parse(obj) for n, obj in api.items()}
            at = {n: obj["metadata"]["resourceVersion"] for n, obj in api.items()}
            continue
        version += 1
        if kind == "WRITE":
            obj = service(name, [("http", "TCP", 80)])
            obj["metadata"]["annotations"] = {"lvs-director.io/scheduler": scheduler}
            obj["metadata"]["resourceVersion"] = str(version)
            obj["metadata"]["namespace"] = "default"
            obj["metadata"]["creationTimestamp"] = "2026-12-03T10:00:00Z"
            event = "MODIFIED" if name in api else "ADDED"
            api[name] = obj
        elif name in api:
            obj, event = api.pop(name), "DELETED"
        else:
            continue
        if watched and copy is not None:  # the watch handed it on (only once listed)
            info = _parse(obj)
            held.watched(event, obj, info)
            if event == "DELETED":
                copy.pop(info.ref, None)
                at.pop(name, None)
            else:
                copy[info.ref] = info
                at[name] = obj["metadata"]["resourceVersion"]


def test_a_long_list_is_sent_in_parts_and_a_relist_of_it_unchanged_sends_nothing() -> None:
    objects = []
    for i in range(1000):
        obj = service(f"s{i}", [("http", "TCP", 80)])
        obj["metadata"].update(resourceVersion=str(i + 1), namespace="default")
        objects.append(obj)
    held, sent = Held(), list[Any]()
    listing = Listing(_known(held), sent.append)
    for obj in objects:
        listing.take(obj, _parse)
    listing.done("1000")
    assert [len(message[1]) for message in sent[:-1]] == [PART] * 3 + [1000 - 3 * PART]
    taken = held.decode([i for m in sent[:-1] for i in m[1]])
    ((kind, infos),) = held.listed(taken, sent[-1][2])
    assert kind == "RELIST" and [info.name for info in infos] == [f"s{i}" for i in range(1000)]
    sent.clear()
    listing = Listing(_known(held), sent.append)
    for obj in objects[1:]:  # s0 gone, the rest as they were
        listing.take(obj, lambda _obj: pytest.fail("an unchanged object was parsed"))
    listing.done("1001")
    assert sent == [("DONE", "1001", ["default/s0"])] and listing.unchanged == 999
    assert held.listed([], ["default/s0"]) == [("DELETED", infos[0])]


def test_an_identity_the_director_never_held_breaks_the_link() -> None:
    held = Held()
    held.listed([], [])
    with pytest.raises(Broken, match="never listed"):
        held.listed([], ["default/ghost"])
    with pytest.raises(Broken, match="where an object was expected"):
        held.decode([("default/x", "1", dumps("not an object"))])
    # a frame naming anything but the values packed here is refused, not run
    with pytest.raises(Broken, match=r"names posix\.system"):
        held.decode([("default/x", "1", pickle.dumps(os.system))])
    with pytest.raises(Broken, match=r"names posix\.system"):
        loads(pickle.dumps(os.system))


def test_a_frame_cut_short_or_absurd_is_refused() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall((10).to_bytes(4, "big") + b"abc")
        theirs.close()
        with pytest.raises(Broken, match="closed within a frame"):
            read_frame(ours)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall((1 << 31).to_bytes(4, "big"))
        with pytest.raises(Broken, match="a frame of"):
            read_frame(ours)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.close()
        assert read_frame(ours) is None


@given(st.text(min_size=1, max_size=24))
def test_a_version_goes_back_to_a_list_process_as_it_came(version: str) -> None:
    """Versions are opaque text: whatever an API server sends comes back to the next list
    exactly (kept as an int only where it reads back the same)."""
    held = Held()
    held.listed([], [])
    obj = service("web", [("http", "TCP", 80)])
    obj["metadata"].update(namespace="default", resourceVersion=version)
    held.watched("ADDED", obj, _parse(obj))
    (kept,) = _known(held).values()
    assert str(kept) == version and compact(version) == kept
    # as a list process compares it: unchanged
    sent: list[Any] = []
    listing = Listing(_known(held), sent.append)
    listing.take(obj, _parse)
    assert listing.unchanged == 1
