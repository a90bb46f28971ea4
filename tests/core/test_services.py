"""Virtual services' keys and the operations on them read as ipvsadm writes them."""

from __future__ import annotations

from director.core.model import (
    Family,
    IpProtocol as Protocol,
    RealServer,
    ServiceConfig,
    ServiceKey,
)
from director.core.services import Op, OpKind


def test_keys_and_ops_read_like_ipvsadm() -> None:
    key = ServiceKey.inet(Protocol.UDP, "2001:db8::1", 53)
    assert key.family is Family.INET6
    assert str(key) == "udp [2001:db8::1]:53"
    assert str(ServiceKey.mark(Family.INET, 9)) == "fwmark 9 ipv4"
    op = Op(OpKind.ADD_DEST, key, dest=RealServer("2001:db8::2", 53, weight=2))
    assert (
        op.describe()
        == "+ real server [2001:db8::2]:53 weight=2 forwarding=nat in udp [2001:db8::1]:53"
    )
    assert Op(OpKind.SET_SERVICE, key, config=ServiceConfig("sh", persistence=60)).describe() == (
        "~ service udp [2001:db8::1]:53 scheduler=sh persistence=60s/32"
    )


def test_a_namespace_or_a_cluster_named_static_is_never_taken_for_the_file_s_own() -> None:
    """Issue 71, 4: a Service in a namespace (or a cluster) named ``static`` was shown as one
    of the file's static services in the API, the status page and the metrics."""
    from director.adapters.metrics.ipvs import origin_labels
    from director.core.services import static_name
    from director.web.views import origin

    assert static_name("static/web") == "web" and static_name("static") == ""
    assert static_name("static/web:http") is None  # namespace static, Service web
    assert static_name("static/shop/web:80") is None  # cluster static
    assert origin("static/web") == {"kind": "static", "name": "web"}
    assert origin("static/web:http") == {
        "kind": "kubernetes",
        "namespace": "static",
        "name": "web",
        "port_name": "http",
    }
    assert origin_labels("static/web:http") == ("static", "web", "http", "")
    assert origin_labels("static/shop/web:80") == ("shop", "web", "80", "static")
    assert origin_labels("static/web") == ("", "web", "", "")
