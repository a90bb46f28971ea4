"""The scrape's text: the kernel's IPVS counters written straight into the exposition a piece
at a time (``IpvsExposition``), and the scrape that serves it gzipped or plain (``Scrape``)."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator

from director.adapters.metrics.promtext import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
)
from director.core.cluster import split_ref
from director.core.counters import DEST_COUNTERS, SERVICE_COUNTERS
from director.core.model import ServiceKey
from director.core.services import static_name
from director.dataplane.interface import Ipvs
from director.dataplane.memory import give_back_free_memory
from director.engine.ports import LoopPort

SERVICE_LABELS = [
    "local_address",
    "local_port",
    "local_mark",
    "proto",
    "namespace",
    "service",
    "port_name",
    "cluster",  # only where the director serves several (an empty label is no label)
]


def origin_labels(origin: str) -> tuple[str, str, str, str]:
    """("namespace", "service", "port_name", "cluster") of an origin like ``shop/web:http``
    or ``prod/shop/web:http``."""
    name = static_name(origin)
    if name is not None:
        return "", name, "", ""
    ref, _, port = origin.partition(":")
    cluster, namespace, name = split_ref(ref)
    return namespace, name, port, cluster


def service_labels(key: ServiceKey, origin: str) -> list[str]:
    proto = key.protocol.label if key.protocol is not None else ""
    mark = str(key.fwmark) if key.fwmark else ""
    port = str(key.port) if not key.fwmark else ""
    return [key.address, port, mark, proto, *origin_labels(origin)]


SERVICE_FAMILIES = (
    (
        "director_ipvs_service_connections_total",
        "Connections scheduled by the virtual service.",
        "counter",
        "connections",
    ),
    ("director_ipvs_service_incoming_packets_total", "Packets in.", "counter", "packets_in"),
    ("director_ipvs_service_outgoing_packets_total", "Packets out.", "counter", "packets_out"),
    ("director_ipvs_service_incoming_bytes_total", "Bytes in.", "counter", "bytes_in"),
    ("director_ipvs_service_outgoing_bytes_total", "Bytes out.", "counter", "bytes_out"),
)
BACKEND_FAMILIES = (
    (
        "director_ipvs_backend_connections_total",
        "Connections sent to the real server.",
        "counter",
        "connections",
    ),
    ("director_ipvs_backend_incoming_bytes_total", "Bytes in.", "counter", "bytes_in"),
    ("director_ipvs_backend_outgoing_bytes_total", "Bytes out.", "counter", "bytes_out"),
    (
        "director_ipvs_backend_connections_active",
        "Active (established) connections.",
        "gauge",
        "active",
    ),
    ("director_ipvs_backend_connections_inactive", "Inactive connections.", "gauge", "inactive"),
    ("director_ipvs_backend_weight", "Weight of the real server.", "gauge", "weight"),
    (
        "director_backend_up",
        "1 when the real server passes its active health checks, 0 when it fails them.",
        "gauge",
        "up",
    ),
)


def _label_text(names: list[str], values: list[str]) -> str:
    """The labels as the text format writes them; an empty cluster is left out (the one
    cluster's series are as they always were)."""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in values)
    return (
        "{"
        + ",".join(f'{n}="{v}"' for n, v in zip(names, escaped, strict=True) if v or n != "cluster")
        + "}"
    )


CHUNK_LINES = 4096  # lines per piece of the text: the whole text is never held


class IpvsExposition:
    """The kernel's counters per virtual service and per real server, straight to the text
    format. At 10,000 services of 10 real servers that is 700,000 series: the generic client
    library took ~8 s a scrape to format them, this takes a fraction. The text comes in
    pieces, built family by family from the kernel's counters read in columns
    (``Counters``): at that size the text is 140 MB, which a whole-text scrape held (and the
    heap kept after it), and the counters read as objects were ~70 MB more. A real server's
    label text is its service's plus its address and port, made as its line is; nothing is
    kept from one scrape to the next (a cache of label texts held one string per real
    server)."""

    def __init__(self, loop: LoopPort, reader: Ipvs | None = None) -> None:
        self.loop = loop
        self.reader = reader or loop.ipvs  # its own socket: scrapes never block writes

    def chunks(self) -> Iterator[bytes]:
        counters = self.reader.read_counters()
        view = self.loop.view
        origins = {key: vs.origin for key, vs in view.desired.items()}
        labels = [
            _label_text(SERVICE_LABELS, service_labels(key, origins.get(key, "")))
            for key in counters.services
        ]
        del origins
        lines: list[str] = []
        for name, text, kind, field in SERVICE_FAMILIES:
            lines.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")
            column = SERVICE_COUNTERS.index(field)
            for index, label in enumerate(labels):
                lines.append(f"{name}{label} {counters.service_value(index, column)}\n")
                if len(lines) >= CHUNK_LINES:
                    yield "".join(lines).encode()
                    lines.clear()
        checks, unhealthy = view.checks, view.unhealthy_dest
        for name, text, kind, field in BACKEND_FAMILIES:
            lines.append(f"# HELP {name} {text}\n# TYPE {name} {kind}\n")
            column = DEST_COUNTERS.index(field) if field != "up" else -1
            for index, label in enumerate(labels):
                key = counters.services[index]
                checked = checks.get(key) if column < 0 else None
                if column < 0 and checked is None:
                    continue  # only a checked real server is up or down
                # SERVICE_LABELS, then remote_address and remote_port
                head = f'{name}{label[:-1]},remote_address="'
                hosts, ports = counters.hosts(index), counters.column(index, 0)
                if checked is None:
                    lines += [
                        f'{head}{host}",remote_port="{port}"}} {figure}\n'
                        for host, port, figure in zip(
                            hosts, ports, counters.column(index, column), strict=True
                        )
                    ]
                else:
                    lines += [
                        f'{head}{host}",remote_port="{port}"}} '
                        f"{int(not unhealthy(key, (host, port)))}\n"
                        for host, port in zip(hosts, ports, strict=True)
                        if (host, port) in checked
                    ]
                if len(lines) >= CHUNK_LINES:
                    yield "".join(lines).encode()
                    lines.clear()
        yield "".join(lines).encode()


class Scrape:
    """``/metrics`` made cheap to ask for: one scrape is built at a time, and a built one
    serves every request for a while (at least 1 s, and twice what it took to build), so
    many scrapers cost what one does and never hold many workers. A scrape is kept gzipped
    only (140 MB of text at 10,000 services is 3 MB so), compressed as it is written, and
    only while it serves: what Prometheus asks for is served as is, a plain request is
    unpacked as it is sent."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self, registry: CollectorRegistry | None, exposition: IpvsExposition | None = None
    ) -> None:
        self.registry, self.exposition = registry, exposition
        self._lock = threading.Lock()
        self._gzipped = b""
        self._until = 0.0

    def gzipped(self) -> bytes:
        """The scrape, gzipped."""
        with self._lock:
            now = time.monotonic()
            if now >= self._until:
                self._gzipped = b""  # the last one is not kept while the next is built
                self._gzipped = self._build()
                took = time.monotonic() - now
                serves = max(1.0, 2 * took)
                self._until = time.monotonic() + serves
                # Let go once it can serve no more (between scrapes, not held for nothing).
                expiry = threading.Timer(serves + 0.1, self._expire)
                expiry.daemon = True
                expiry.start()
            return self._gzipped

    def _expire(self) -> None:
        with self._lock:
            if time.monotonic() >= self._until:
                self._gzipped = b""

    def plain(self) -> Iterator[bytes]:
        """The scrape as text, in pieces (built here, in the request's scrape slot; only
        the unpacking is left to the response)."""
        return _unpacked(self.gzipped())

    def _build(self) -> bytes:
        packer = zlib.compressobj(1, zlib.DEFLATED, GZIP_WBITS)
        if self.registry is None:
            return packer.flush()
        parts = [packer.compress(generate_latest(self.registry))]
        if self.exposition is not None:
            parts.extend(packer.compress(chunk) for chunk in self.exposition.chunks())
        parts.append(packer.flush())
        body = b"".join(parts)
        del parts
        give_back_free_memory()  # the table read and the text's pieces are garbage now
        return body


def _unpacked(gzipped: bytes) -> Iterator[bytes]:
    """The text, a bounded piece at a time (40 times the compressed bytes, unbounded)."""
    unpacker = zlib.decompressobj(GZIP_WBITS)
    pending = gzipped
    while pending:
        piece = unpacker.decompress(pending, UNPACK_BYTES)
        pending = unpacker.unconsumed_tail
        if piece:
            yield piece
    rest = unpacker.flush()
    if rest:
        yield rest


GZIP_WBITS = 31  # zlib's gzip container
UNPACK_BYTES = 256 * 1024  # text sent a piece at a time to a plain (not gzip) request
