"""The scrape: the registry's figures and the kernel's counters as one text, kept gzipped and
served from one build to every scraper for a while, unpacked in pieces for a plain request.
(The counters' lines themselves, against a running loop and the fake IPVS, are
``tests/adapters/metrics/test_collector.py``'s and ``tests/test_alerts.py``'s.)"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import cast

from director.adapters.metrics.ipvs import UNPACK_BYTES, IpvsExposition, Scrape
from director.adapters.metrics.promtext import CollectorRegistry, Gauge


class Lines:
    """Stands in for the kernel's counters: ``pieces`` as the exposition's chunks."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces, self.reads = pieces, 0

    def chunks(self) -> Iterator[bytes]:
        self.reads += 1
        yield from self.pieces


def test_one_build_serves_every_scraper_gzipped_or_plain() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("director_test_figure", "A figure.", registry=registry)
    gauge.set(1)
    kernel = Lines(b'node_ipvs_backend_weight{x="1"} 5\n', b'node_ipvs_backend_weight{x="2"} 0\n')
    scrape = Scrape(registry, cast(IpvsExposition, kernel))
    first = gzip.decompress(scrape.gzipped()).decode()
    assert "director_test_figure 1.0\n" in first
    assert first.endswith('node_ipvs_backend_weight{x="1"} 5\nnode_ipvs_backend_weight{x="2"} 0\n')
    gauge.set(2)  # within the build's life: served as it was built, the kernel not read again
    assert b"".join(scrape.plain()).decode() == first
    assert kernel.reads == 1


def test_a_big_text_is_unpacked_a_bounded_piece_at_a_time() -> None:
    line = b'node_ipvs_backend_connections_total{remote_address="192.0.2.1"} 12345\n'
    big = line * (3 * UNPACK_BYTES // len(line) + 1)
    scrape = Scrape(CollectorRegistry(), cast(IpvsExposition, Lines(big)))
    pieces = list(scrape.plain())
    assert len(pieces) >= 3 and max(len(p) for p in pieces) <= UNPACK_BYTES
    assert b"".join(pieces).endswith(big)


def test_no_registry_is_an_empty_scrape() -> None:
    assert b"".join(Scrape(None).plain()) == b""
