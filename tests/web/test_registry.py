"""The admin API's routes, each declared once: the rule Flask serves and the OpenAPI path
it is documented under are one declaration, so they cannot drift apart."""

from __future__ import annotations

from director.web.openapi import document
from director.web.registry import OPERATIONS, Operation
from tests.weblab import Director


def test_a_rule_is_written_as_its_openapi_path_with_its_parameters() -> None:
    op = Operation("/api/v1/services/<namespace>/<name>", "get", "one Service", reply=dict)
    assert op.path == "/api/v1/services/{namespace}/{name}"
    assert op.parameters == ["namespace", "name"]
    typed = Operation("/api/v1/drains/<int:ident>", "delete", "undrain", reply=dict)
    assert (typed.path, typed.parameters) == ("/api/v1/drains/{ident}", ["ident"])


def test_every_route_served_is_documented_and_every_documented_route_is_served(
    director: Director,
) -> None:
    served = {
        (rule.rule, method.lower())
        for rule in director.app.url_map.iter_rules()
        if rule.rule.startswith("/api/")
        for method in rule.methods or ()
        if method not in {"HEAD", "OPTIONS"}
    }
    declared = {(op.rule, op.method) for op in OPERATIONS}
    # The document does not describe itself; every other route is in it.
    assert served - declared == {("/api/v1/openapi.json", "get")}
    assert declared <= served
    paths = document(frozenset({"rr"}))["paths"]
    for op in OPERATIONS:
        assert op.method in paths[op.path], f"{op.method} {op.path} is not in the document"
