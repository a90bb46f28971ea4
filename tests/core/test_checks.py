"""The health checks' state machine and their spelling: a real server changes state after
``fall`` failures or ``rise`` successes, and a check's text is read or refused with why."""

from __future__ import annotations

import pytest

from director.core.checks import CheckSpec, Health, parse_check

FAST = CheckSpec("tcp", "/", (200, 399), interval=0.1, timeout=0.3, rise=2, fall=2)


def test_state_changes_after_fall_failures_and_rise_successes() -> None:
    h = Health()
    spec = CheckSpec(rise=2, fall=3)
    assert [h.observe(False, "x", spec, 0, 0) for _ in range(3)] == [False, False, True]
    assert h.up is False
    assert [h.observe(True, "ok", spec, 0, 0) for _ in range(2)] == [False, True]
    assert h.up is True
    h.observe(False, "x", spec, 0, 0)
    h.observe(True, "ok", spec, 0, 0)  # a success resets the failure count
    assert [h.observe(False, "x", spec, 0, 0) for _ in range(2)] == [False, False]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tcp", ("tcp", "/")),
        ("http", ("http", "/")),
        ("https:/ready", ("https", "/ready")),
        ("https://Shop.Example.com/ready", ("https", "/ready", "shop.example.com")),
        ("http://www.example.com", ("http", "/", "www.example.com")),
        ("https://192.0.2.1/ready", "the host must be a DNS name"),
        ("https://www.example.com:8443/", "the host must be a DNS name"),
        ("https://-bad-.example/", "the host must be a DNS name"),
        ("udp", "the check must be one of"),
        ("tcp:/x", "a tcp check takes no path"),
        ("http:healthz", "must start with /"),
    ],
)
def test_parse_check(text: str, expected: object) -> None:
    parsed = parse_check(text, CheckSpec())
    if isinstance(expected, tuple):
        assert not isinstance(parsed, str)
        assert (parsed.kind, parsed.path, parsed.host) == (*expected, None)[:3]
    else:
        assert isinstance(parsed, str) and str(expected) in parsed
