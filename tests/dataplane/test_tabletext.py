"""The kernel's text read for the adapter, and what the director's own changes make it
forget."""

from __future__ import annotations

import pytest

from director.core.added import AddedService, OpChain
from director.core.model import IpProtocol as Protocol, RealServer, ServiceConfig, ServiceKey
from director.core.services import Op, OpKind, VirtualService
from director.dataplane.tabletext import TableText

WEB = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80)
API = ServiceKey.inet(Protocol.TCP, "198.51.100.11", 443)
NEW = ServiceKey.inet(Protocol.TCP, "198.51.100.12", 80)
A = RealServer("192.0.2.11", 8080)


def test_what_the_director_changes_is_forgotten_and_what_it_adds_counted() -> None:
    """A threshold the director sets shows in no text: a service it touched must be read
    in full at the next resync, whatever its text says (else the read would return the
    old real servers and the director would 'repair' its own change forever)."""
    text = TableText(None, opened=False)
    settled = {WEB: "read before", API: "read before", NEW: "read before"}
    added = AddedService(NEW, VirtualService.build(NEW, ServiceConfig("rr"), [A]))
    ops = OpChain([[Op(OpKind.SET_DEST, WEB, dest=A._replace(upper_threshold=9))], added])
    text.changing(ops, settled)
    assert settled == {API: "read before"}
    assert text.rotation.size == 1
    text.changing([Op(OpKind.ADD_SERVICE, API, config=ServiceConfig("rr"))], settled)
    assert settled == {} and text.rotation.size == 2


def test_a_kernel_that_prints_no_text_is_read_in_full() -> None:
    text = TableText(None, opened=False)
    text.rotation.added(50_000)
    assert text.read() is None
    assert text.share().full(hash(WEB), WEB)


@pytest.mark.kernel
def test_the_text_is_the_namespaces_own_and_read_afresh_each_time(netns: str) -> None:
    """Opened once in the namespace, read again from its start: it shows that namespace's
    table as it is now, not the process's own namespace's nor the first read's."""
    from director.dataplane.kernel import KernelIpvs
    from director.dataplane.proctext import prefix_of

    kernel = KernelIpvs(netns=netns)
    text = TableText(netns)
    try:
        assert prefix_of(WEB) not in (text.read() or b"")
        assert kernel.apply([Op(OpKind.ADD_SERVICE, WEB, config=ServiceConfig("rr"))]).ok
        assert prefix_of(WEB) in (text.read() or b"")
        assert kernel.apply([Op(OpKind.DEL_SERVICE, WEB)]).ok
        assert prefix_of(WEB) not in (text.read() or b"")
    finally:
        text.close()
        kernel.close()
