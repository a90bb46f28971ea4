"""``director run`` on the fake dataplane: what a static box loads, and where its start's
time went."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_main import API_ONLY, CLUSTER_ONLY, api_config, modules_loaded_by_run


def test_a_static_box_without_api_loads_neither_the_cluster_client_nor_the_web_server(
    tmp_path: Path,
) -> None:
    """Nor pydantic (the file's sections check themselves: pydantic is the admin API's), nor
    Prometheus's client (only the API serves its figures)."""
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    loaded = modules_loaded_by_run(config)
    assert {"director", "ryml"} <= loaded, "the import log was read"
    unused = CLUSTER_ONLY | API_ONLY | {"jinja2", "pydantic", "pydantic_core", "prometheus_client"}
    assert loaded.isdisjoint(unused), sorted(loaded & unused)


def test_a_static_box_with_the_api_loads_the_web_server_but_not_the_cluster_client(
    tmp_path: Path,
) -> None:
    loaded = modules_loaded_by_run(api_config(tmp_path))
    assert loaded >= API_ONLY | {"prometheus_client"}, sorted(loaded)
    assert loaded.isdisjoint(CLUSTER_ONLY), sorted(loaded & CLUSTER_ONLY)
