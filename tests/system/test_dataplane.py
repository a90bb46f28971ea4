"""The data path under real load (the lab VM): each forwarding mode the director programs
carries wrk's requests and iperf3's stream to untouched real servers (nginx), every request
answered and every one counted by the kernel on a real server; behind the SYN guard too,
each connection through a cookie. Counts, never timings: the figures are
``make bench-dataplane``'s."""

from __future__ import annotations

import time
from pathlib import Path

import pytest


@pytest.mark.kernel
def test_each_forwarding_mode_carries_real_load_to_both_real_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from director.dataplane.netns import synproxy_stats
    from lab.dataplane import (
        BULK,
        STATS_LAG,
        VARIANTS,
        WEB,
        iperf,
        labs,
        parse_wrk,
        requests_done,
        served_by,
        wrk,
    )

    modes = ("nat", "dr", "tun", "fullnat", "nat+guard", "fullnat+guard")
    seen: list[str] = []
    with labs(tmp_path) as boxes:
        for variant in (v for v in VARIANTS if v.name in modes):
            box = boxes.director(variant)
            box.serve(variant)
            before = served_by(box.lab)
            cookies = synproxy_stats(box.lab.lvs.name).get("cookie_valid", 0)
            out = wrk(box.lab.client, WEB, seconds=2, connections=4, close=True)
            _rate, _p99, errors = parse_wrk(out)
            done = requests_done(out)
            time.sleep(STATS_LAG)  # the kernel's counters are summed every 2 s
            grown = {rs: n - before.get(rs, 0) for rs, n in served_by(box.lab).items()}
            assert errors == 0, f"{variant.name}: {out}"
            assert done > 0 and all(n > 0 for n in grown.values()) and len(grown) == 2, (
                variant.name,
                grown,
                out,
            )
            # each request its own connection (Connection: close), each one scheduled by
            # IPVS to a real server
            assert sum(grown.values()) >= done, (variant.name, grown, done)
            passed = synproxy_stats(box.lab.lvs.name).get("cookie_valid", 0) - cookies
            if variant.guard:  # each connection came through a SYN cookie
                assert passed >= done, (variant.name, passed, done)
            else:
                assert passed == 0, (variant.name, passed)
            gbps = iperf(box.lab.client, BULK, seconds=1)
            assert gbps > 0, variant.name
            seen.append(f"{variant.name}: {done} requests, {sorted(grown.values())}")
    with capsys.disabled():
        print("\ndata path: " + "; ".join(seen))
