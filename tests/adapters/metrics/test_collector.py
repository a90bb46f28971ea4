"""The director's metrics as Prometheus scrapes them: node_exporter's label names, promtool's
check, exact escaping, gzip, each real server with its own figures, and a scrape of a big
table leaving the director the size it was."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from director.adapters.metrics.ipvs import IpvsExposition, Scrape
from director.adapters.metrics.promtext import CollectorRegistry
from director.core.model import IpProtocol as Protocol, ServiceKey
from director.dataplane.fake import FakeIpvs
from lab.wait import eventually
from tests.weblab import WEB, Director


def test_metrics_use_node_exporter_labels_and_pass_promtool(
    director: Director, client: FlaskClient, tmp_path: Path
) -> None:
    director.ipvs.set_connections(WEB, ("192.0.2.11", 8080), active=3, inactive=0)
    text = client.get("/metrics").get_data(as_text=True)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = {
        "local_address": "198.51.100.10",
        "local_port": "80",
        "local_mark": "",
        "proto": "tcp",
        "namespace": "",
        "service": "web",
        "port_name": "",
        "remote_address": "192.0.2.11",
        "remote_port": "8080",
    }
    key = tuple(sorted(labels.items()))
    assert samples[("director_ipvs_backend_connections_active", key)] == 3
    assert samples[("director_ipvs_backend_weight", key)] == 1
    assert 'director_vrrp_state{state="MASTER"} 0.0' in text
    assert "director_sync_duration_seconds_bucket" in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (make setup does)"
    scrape = tmp_path / "scrape.prom"
    scrape.write_text(text)
    with scrape.open() as handle:
        done = subprocess.run(
            [promtool, "check", "metrics"],
            stdin=handle,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr


def test_metrics_text_is_exact_escaped_and_gzipped_when_asked(
    director: Director, client: FlaskClient
) -> None:
    """The kernel's families are written straight to text (issue 13, item 26): the same
    series prometheus_client would write, and what Prometheus asks for, gzip."""
    import gzip

    plain = client.get("/metrics").get_data()
    zipped = client.get("/metrics", headers={"Accept-Encoding": "gzip, deflate"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.get_data()) == plain, "one scrape, served both ways"
    families = {f.name: f for f in text_string_to_metric_families(plain.decode())}
    assert families["director_ipvs_backend_connections"].type == "counter"
    assert families["director_ipvs_backend_weight"].type == "gauge"
    weights = {
        s.labels["remote_address"]
        for s in families["director_ipvs_backend_weight"].samples
        if s.labels["service"] == "web"
    }
    assert weights == {"192.0.2.11", "192.0.2.12"}
    from director.adapters.metrics.ipvs import _label_text

    text = _label_text(["a", "b"], ['say "hi"', "back\\slash\nnew"])
    line = f"x{text} 1\n"
    (sample,) = next(iter(text_string_to_metric_families(line))).samples
    assert sample.labels == {"a": 'say "hi"', "b": "back\\slash\nnew"}


def test_each_real_server_is_scraped_with_its_own_figures_and_health() -> None:
    """Per real server: its address (a tunnelled IPv6 one of an IPv4 service too), its
    weight and connection counts; ``director_backend_up`` only for the checked ones, 0 for
    the one failing its checks; a service with no real servers still has its totals."""
    from types import SimpleNamespace

    from director.core.model import Forwarding, RealServer, ServiceConfig
    from director.core.services import Op, OpKind, Stats

    web, empty = ServiceKey.inet(Protocol.TCP, "198.51.100.10", 80), ServiceKey.mark(4, 9)
    a, b = RealServer("192.0.2.11", 8080, 2), RealServer("2001:db8::7", 8080, 5, Forwarding.TUN)
    ipvs = FakeIpvs()
    assert ipvs.apply(
        [
            Op(OpKind.ADD_SERVICE, web, config=ServiceConfig("rr")),
            Op(OpKind.ADD_DEST, web, dest=a),
            Op(OpKind.ADD_DEST, web, dest=b),
            Op(OpKind.ADD_SERVICE, empty, config=ServiceConfig("rr")),
        ]
    ).ok
    ipvs.set_connections(web, b.key, active=4, inactive=1)
    ipvs.set_stats(web, Stats(connections=12, bytes_in=3000))
    view = SimpleNamespace(
        desired={web: SimpleNamespace(origin="shop/web:http")},
        checks={web: {a.key: object(), b.key: object()}},
        unhealthy_dest=lambda key, dkey: dkey == b.key,
    )
    exposition = IpvsExposition(SimpleNamespace(view=view, ipvs=ipvs))  # type: ignore[arg-type]
    text = b"".join(exposition.chunks()).decode()
    samples = {
        (s.name, s.labels.get("remote_address", s.labels["local_mark"])): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("director_ipvs_backend_weight", "192.0.2.11")] == 2
    assert samples[("director_ipvs_backend_weight", "2001:db8::7")] == 5
    assert samples[("director_ipvs_backend_connections_active", "2001:db8::7")] == 4
    assert samples[("director_ipvs_backend_connections_inactive", "2001:db8::7")] == 1
    assert samples[("director_backend_up", "192.0.2.11")] == 1
    assert samples[("director_backend_up", "2001:db8::7")] == 0
    assert samples[("director_ipvs_service_connections_total", "")] == 12
    assert samples[("director_ipvs_service_incoming_bytes_total", "")] == 3000
    assert samples[("director_ipvs_service_connections_total", "9")] == 0  # the empty one
    assert 'namespace="shop",service="web",port_name="http",remote_address="192.0.2.11"' in text
    assert sum(name == "director_backend_up" for name, _ in samples) == 2


def test_a_scrape_of_a_big_table_leaves_the_director_the_size_it_was() -> None:
    """20,000 real servers are 28 MB of text. The director once kept the whole text (and its
    gzip) between scrapes, and the heap it was built in: a director of 10,000 Services grew
    by 100 MB at the first scrape. Now the text is written in pieces, compressed as it
    goes, and only the 1 MB gzip is kept; a plain request gets it back in bounded pieces."""
    import ctypes
    import gzip
    from types import SimpleNamespace

    from director.adapters.metrics.ipvs import UNPACK_BYTES
    from director.core.model import RealServer, ServiceConfig
    from director.core.services import Op, OpKind

    def resident_mib() -> float:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024

    ipvs, desired = FakeIpvs(record=False), {}
    for i in range(2000):
        key = ServiceKey.inet(Protocol.TCP, f"198.18.{i // 250}.{1 + i % 250}", 80)
        desired[key] = SimpleNamespace(origin=f"default/svc-{i:05d}:http")
        servers = [RealServer(f"10.{i // 250}.{i % 250}.{d}", 8080) for d in range(1, 11)]
        ops = [Op(OpKind.ADD_DEST, key, dest=rs) for rs in servers]
        ipvs.apply([Op(OpKind.ADD_SERVICE, key, config=ServiceConfig("rr")), *ops])
    view = SimpleNamespace(desired=desired, checks={}, unhealthy_dest=lambda *_: False)
    scrape = Scrape(CollectorRegistry(), IpvsExposition(SimpleNamespace(view=view, ipvs=ipvs)))  # type: ignore[arg-type]
    getattr(ctypes.CDLL(None), "malloc_trim", lambda _: 0)(0)
    before = resident_mib()
    zipped = scrape.gzipped()
    grown = resident_mib() - before
    pieces = list(scrape.plain())
    text = b"".join(pieces)
    assert gzip.decompress(zipped) == text
    assert len(text) > 25e6 and len(zipped) < len(text) / 20
    assert text.count(b"\ndirector_ipvs_backend_weight{") == 20_000
    assert max(len(p) for p in pieces) <= UNPACK_BYTES
    print(f"a {len(text) / 1e6:.0f} MB scrape: the process grew {grown:.1f} MiB")
    assert grown < 12, f"a {len(text) / 1e6:.0f} MB scrape left the process {grown:.1f} MiB bigger"
    # Once it can serve no more, not even the gzip is held until the next scrape.
    eventually(lambda: scrape._gzipped == b"", timeout=10, what="the scrape let go")


def test_a_big_tables_resync_says_how_much_the_kernels_text_vouched_for() -> None:
    """Past 1,000 services a resync reads a share of the real servers through netlink and
    takes the rest as the resync before read them, the kernel's text showing them unchanged.
    The scrape says how many of each, and in how many resyncs every service is read (how
    long a threshold set by hand may stand)."""
    from director.adapters.metrics.collector import DirectorCollector
    from director.adapters.metrics.promtext import generate_latest
    from director.core.model import RealServer, ServiceConfig
    from director.core.services import Op, OpKind
    from director.engine.loop import Controller
    from director.schema.config import parse_config
    from tests.weblab import STATIC

    ipvs = FakeIpvs()
    others = [ServiceKey.inet(Protocol.TCP, "203.0.113.1", port) for port in range(1, 1501)]
    ops = []
    for key in others:  # another tool's services, outside the director's networks
        ops += [
            Op(OpKind.ADD_SERVICE, key, config=ServiceConfig("rr")),
            Op(OpKind.ADD_DEST, key, dest=RealServer("192.0.2.50", key.port)),
        ]
    assert ipvs.elsewhere().apply(ops).ok
    controller = Controller(ipvs, parse_config(STATIC, "static.yaml"))
    registry = CollectorRegistry()
    registry.register(DirectorCollector(controller.door()))

    def figures() -> dict[str, float]:
        text = generate_latest(registry).decode()
        return {
            s.name + "".join(s.labels.values()): s.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("director_resync_s")
            for s in family.samples
            if not s.name.endswith("_created")
        }

    eventually(lambda: controller.step(0.01) or controller.health.synced, what="first sync")
    before = figures()
    assert before["director_resync_services_read_totaltext"] == 0, "nothing read before"
    controller.programmer.full_resync()
    after = figures()
    netlink = after["director_resync_services_read_totalnetlink"]
    netlink -= before["director_resync_services_read_totalnetlink"]
    text = after["director_resync_services_read_totaltext"]
    assert netlink + text == len(others) + 2  # every service: web and dns, and the others
    assert text > len(others) / 4, "about half vouched for by the text"
    assert after["director_resync_shares"] == 2  # 1,502 services: two shares of 1,000 at most
