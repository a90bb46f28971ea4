"""What a cluster's intake process sends the director: the objects come out equal to what the
child parsed, sharing their strings as an in-process parse does, and a relist comes out
whole the first time, and a later one as the changes that make the director's copy that list
(what did not change is not sent at all)."""

from __future__ import annotations

import os
import pickle
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from director.adapters.intake_wire import (
    Broken,
    Mirror,
    Sender,
    dumps,
    key_of,
    loads,
    pack,
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


@contextmanager
def wire() -> Iterator[tuple[Sender, Callable[..., list[tuple[str, str, Any]]]]]:
    """A sender, and ``call(resource, kind, payload)``: the sender's call made (on a thread
    of its own, as a watcher makes it) and what the director's end hands on for it."""
    ours, theirs = socket.socketpair()
    mirror, sender = Mirror(), Sender(theirs)

    def call(resource: str, kind: str, payload: Any) -> list[tuple[str, str, Any]]:
        def send() -> None:
            packed = [pack(i) for i in payload] if kind == "RELIST" else pack(payload)
            sender.handle(resource, kind, packed)
            sender.send(("", "END", None))

        thread = threading.Thread(target=send)
        thread.start()
        out = []
        while True:
            frame = read_frame(ours)
            assert frame is not None
            resource, kind, payload = loads(frame)
            if kind == "END":
                thread.join()
                return out
            out.extend((resource, *handed) for handed in mirror.take(resource, kind, payload))

    try:
        yield sender, call
    finally:
        ours.close()
        theirs.close()


@settings(max_examples=60, deadline=None)
@given(OBJECTS)
def test_an_object_arrives_equal_sharing_its_strings_as_a_parse_does(info: Any) -> None:
    with wire() as (_, received):
        ((resource, kind, got),) = received("c/things", "ADDED", info)
    assert (resource, kind) == ("c/things", "ADDED")
    assert got == info and type(got) is type(info)
    assert got.cluster is sys.intern("c")
    if isinstance(got, ServiceInfo):
        assert got.ref is sys.intern(got.ref), "one string for the Service's key everywhere"
        assert dict(got.labels) == dict(info.labels)
    if isinstance(got, SliceInfo) and got.service:
        assert got.service is sys.intern(got.service), "shared with its Service's ref"


def _keyed(items: list[Any]) -> list[Any]:
    """A list as the API server gives it: one object per key (the last one wins)."""
    return list({key_of(i): i for i in items}.values())


# A cluster's history: relists (the whole list again) and watch events, in any order.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("RELIST"), st.lists(services(), max_size=6)),
        st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), services()),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=80, deadline=None)
@given(STEPS)
def test_a_relist_leaves_the_directors_copy_as_the_list_sending_only_changes(
    steps: list[Any],
) -> None:
    with wire() as (sender, received):
        held: dict[str, ServiceInfo] | None = None  # the director's copy, by key
        for kind, payload in steps:
            if kind != "RELIST":
                ((_, got_kind, got),) = received("c/services", kind, payload)
                assert (got_kind, got) == (kind, payload)
                if held is not None:
                    if kind == "DELETED":
                        held.pop(key_of(got), None)
                    else:
                        held[key_of(got)] = got
                continue
            items = _keyed(payload)
            quiet = sender.unchanged
            handed = received("c/services", "RELIST", items)
            if held is None:  # the first list: whole, in its order
                assert handed == [("c/services", "RELIST", items)]
                held = {key_of(i): i for i in items}
                continue
            for _, got_kind, got in handed:  # as the snapshot takes watch events
                assert got_kind in ("ADDED", "MODIFIED", "DELETED")
                if got_kind == "DELETED":
                    del held[key_of(got)]
                else:
                    assert held.get(key_of(got)) != got, "only what changed is sent"
                    held[key_of(got)] = got
            assert held == {key_of(i): i for i in items}
            assert sender.unchanged - quiet == len(items) - sum(
                kind != "DELETED" for _, kind, _ in handed
            )


def test_a_long_list_is_sent_in_parts_and_a_relist_of_it_unchanged_sends_nothing() -> None:
    infos = [
        service_from_json(service(f"s{i}", [("http", "TCP", 80)]), cluster="c") for i in range(1000)
    ]
    with wire() as (sender, received):
        ((_, kind, got),) = received("c/services", "RELIST", infos)
        assert kind == "RELIST" and got == infos
        assert received("c/services", "RELIST", infos[1:]) == [("c/services", "DELETED", infos[0])]
        assert sender.unchanged == 999


def test_a_key_the_director_was_never_sent_breaks_the_link() -> None:
    mirror = Mirror()
    with pytest.raises(Broken, match="never sent"):
        mirror.take("c/services", "GONE", ["c/default/ghost"])
    with pytest.raises(Broken, match="where an object was expected"):
        mirror.take("c/services", "ADDED", dumps("not an object"))
    # a frame naming anything but the values packed here is refused, not run
    with pytest.raises(Broken, match=r"names posix\.system"):
        mirror.take("c/services", "ADDED", pickle.dumps(os.system))


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
