"""The admin API server's connections: counted per client and in all, forgotten once, and
handed back by the workers to a loop that the handing wakes."""

from __future__ import annotations

import resource
import selectors
import socket
from typing import cast

from director.adapters.http_conns import Mailbox, Slots, raise_descriptor_limit
from director.adapters.http_wire import Conn


def conn(fd: int, client: str) -> Conn:
    return Conn(cast(socket.socket, None), fd, client, 40000 + fd, False, 0.0)


def test_connections_are_counted_per_client_and_forgotten_once() -> None:
    slots = Slots(limit=8)
    one, two, other = conn(3, "192.0.2.1"), conn(4, "192.0.2.1"), conn(5, "192.0.2.2")
    for c in (one, two, other):
        slots.add(c)
    assert slots.per_client == {"192.0.2.1": 2, "192.0.2.2": 1} and len(slots.conns) == 3
    assert slots.remove(one) and not slots.remove(one), "a second close is no close"
    assert slots.remove(other) and "192.0.2.2" not in slots.per_client
    stale = conn(4, "192.0.2.1")  # the descriptor reused by a newer connection
    assert not slots.remove(stale) and slots.per_client == {"192.0.2.1": 1}


def test_a_connection_handed_back_wakes_the_loop() -> None:
    box = Mailbox()
    selector = selectors.DefaultSelector()
    selector.register(box.reader, selectors.EVENT_READ)
    assert selector.select(0) == []
    box.put(conn(3, "192.0.2.1"))
    box.put(conn(4, "192.0.2.1"))
    assert len(selector.select(0)) == 1
    assert [c.fd for c in box.take()] == [3, 4] and box.take() == []


def test_the_descriptor_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_descriptor_limit() >= soft
    if hard != resource.RLIM_INFINITY:
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
