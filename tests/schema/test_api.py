"""The admin API's request bodies read directly: a JSON object of known fields, each value
checked, and the first reason given in plain words; every body and reply published as an
OpenAPI 3.0 schema whose references resolve."""

from __future__ import annotations

import json
from typing import Any

import pytest

from director.schema.api import (
    BodyError,
    DrainRequest,
    MaintenanceRequest,
    SchedulerChoice,
    read,
    schemas,
)


def test_a_drain_body_is_read_with_its_address_written_canonically() -> None:
    drain = read(DrainRequest, {"address": "2001:DB8::0:1", "port": 8080})
    assert (drain.address, drain.port, drain.service) == ("2001:db8::1", 8080, None)
    assert read(SchedulerChoice, {"scheduler": "mh", "flags": ["mh-port"]}).flags == ("mh-port",)


@pytest.mark.parametrize(
    ("model", "body", "reason"),
    [
        (DrainRequest, [], "the body must be a JSON object"),
        (DrainRequest, {"address": "192.0.2.1", "weight": 0}, "unknown field(s) weight"),
        (DrainRequest, {"port": 80}, "missing field(s) address"),
        (DrainRequest, {"address": 7}, "address must be a string"),
        (DrainRequest, {"address": "::ffff:192.0.2.1"}, "write 192.0.2.1"),
        (DrainRequest, {"address": "192.0.2.1", "port": 0}, "between 1 and 65535"),
        (DrainRequest, {"address": "192.0.2.1", "port": True}, "between 1 and 65535"),
        (SchedulerChoice, {"scheduler": "sh", "flags": "sh-port"}, "a list of strings"),
        (SchedulerChoice, {"scheduler": 1}, "scheduler must be a string"),
        (MaintenanceRequest, {"reason": "Wartung \u00fcber Nacht"}, "printable ASCII"),
        (MaintenanceRequest, {"reason": ""}, "printable ASCII"),
    ],
)
def test_a_bad_body_is_refused_with_its_first_reason(
    model: type, body: object, reason: str
) -> None:
    with pytest.raises(BodyError) as caught:
        read(model, body)
    assert reason in str(caught.value)
    assert caught.value.status == 400


def test_every_body_and_reply_is_published_and_its_references_resolve() -> None:
    published = schemas()
    for name in ("DrainRequest", "SchedulerChoice", "MaintenanceRequest", "Status", "Bgp"):
        assert name in published, name
    text = json.dumps(published)
    assert '"$defs"' not in text, "OpenAPI 3.0 has components, not $defs"

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if "$ref" in node else []
            return found + [r for value in node.values() for r in refs(value)]
        if isinstance(node, list):
            return [r for value in node for r in refs(value)]
        return []

    for ref in refs(published):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in published, f"{ref} does not resolve"
