"""What ``director check`` notes of a valid file: SNAT addresses that cannot carry what the
real servers' thresholds allow."""

from __future__ import annotations

import pytest

from director.schema.config import parse_config
from director.schema.notes import snat_notes


@pytest.mark.parametrize(
    ("snat", "thresholds", "noted"),
    [
        # 2 ports x 1 address: a threshold of 3 cannot be met; of 2 it can.
        ("{addresses: [192.0.2.1], ports: 40000-40001}", (3,), "carry 2 to it"),
        ("{addresses: [192.0.2.1], ports: 40000-40001}", (2,), None),
        # Two addresses carry twice as many.
        ("{addresses: [192.0.2.1, 192.0.2.2], ports: 40000-40001}", (3,), None),
        # Two services to the same real server share what the addresses carry.
        ("{addresses: [192.0.2.1], ports: 40000-40001}", (1, 2), "send it 3 connections"),
        # Unbounded (no threshold): nothing to compare.
        ("{addresses: [192.0.2.1], ports: 40000-40001}", (0,), None),
        # The kernel's range when snat.ports is unset: 64,512 a address.
        ("{addresses: [192.0.2.1]}", (64512,), None),
        ("{addresses: [192.0.2.1]}", (64513,), "1 address(es) x 64512 source ports"),
    ],
)
def test_check_says_when_the_snat_addresses_cannot_carry_what_thresholds_allow(
    snat: str, thresholds: tuple[int, ...], noted: str | None
) -> None:
    services = "".join(
        f"  - {{name: s{i}, address: 203.0.113.{100 + i}, port: 80, forwarding: fullnat,\n"
        f"     real_servers: [{{address: 192.0.2.11, port: 8080, upper_threshold: {t}}}]}}\n"
        for i, t in enumerate(thresholds)
    )
    text = f"ownership: {{networks: [203.0.113.96/28]}}\nservices:\n{services}snat: {snat}\n"
    notes = snat_notes(parse_config(text, "fullnat.yaml"))
    if noted is None:
        assert notes == []
    else:
        assert len(notes) == 1 and noted in notes[0] and "192.0.2.11:8080/tcp" in notes[0]
