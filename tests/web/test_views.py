"""The JSON the admin API answers with: where a virtual service comes from, and times as
RFC 3339 UTC."""

from __future__ import annotations

from director.web.views import iso, origin


def test_origin_names_a_static_service_or_a_kubernetes_service_and_its_port() -> None:
    assert origin("static/web") == {"kind": "static", "name": "web"}
    assert origin("shop/cart:https") == {
        "kind": "kubernetes",
        "namespace": "shop",
        "name": "cart",
        "port_name": "https",
    }
    assert origin("shop/cart")["port_name"] == ""  # an unnamed port


def test_times_are_utc_to_the_second_and_none_stays_none() -> None:
    assert iso(None) is None
    assert iso(0) == "1970-01-01T00:00:00Z"
    assert iso(1_700_000_000.9) == "2023-11-14T22:13:20Z"
