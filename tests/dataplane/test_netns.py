"""Code run inside a network namespace (by ``ip netns`` name) on a helper thread: it sees
that namespace's interfaces and kernel parameters, a socket it opens stays there, what it
raises comes back to the caller, and the caller's own namespace is untouched."""

from __future__ import annotations

import socket

import pytest

from director.dataplane.netns import in_netns, read_sysctls, write_sysctls

FORWARD = "net.ipv4.ip_forward"


def test_code_runs_in_the_namespace_and_the_caller_stays_where_it_was(netns: str) -> None:
    inside = in_netns(netns, lambda: [name for _, name in socket.if_nameindex()])
    assert inside == ["lo"], "a fresh namespace holds only its loopback"
    assert in_netns(None, socket.if_nameindex) == socket.if_nameindex()
    held = in_netns(netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    with held:  # bound in the namespace after its thread ended: its lo is up, nothing else
        held.bind(("127.0.0.1", 0))
        with pytest.raises(OSError):
            held.connect(("192.0.2.1", 9))  # no route there from inside


def test_kernel_parameters_are_read_and_set_as_the_namespace_sees_them(netns: str) -> None:
    host = read_sysctls(None, [FORWARD])[FORWARD]
    wanted = "0" if host == "1" else "1"
    assert write_sysctls(netns, {FORWARD: wanted}) == {}
    assert read_sysctls(netns, [FORWARD, "net.ipv4.no_such_thing"]) == {
        FORWARD: wanted,
        "net.ipv4.no_such_thing": "",
    }
    assert read_sysctls(None, [FORWARD])[FORWARD] == host, "the host's own is untouched"
    failed = write_sysctls(netns, {"net.ipv4.vs.no_such_thing": "1"})
    assert list(failed) == ["net.ipv4.vs.no_such_thing"] and failed["net.ipv4.vs.no_such_thing"]


def test_a_namespace_that_is_not_there_is_an_error_in_the_callers_thread() -> None:
    with pytest.raises(FileNotFoundError):
        in_netns("no-such-namespace-here", lambda: None)
