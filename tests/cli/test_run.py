"""``director run`` on the fake dataplane: what a static box loads, and where its start's
time went."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_main import API_ONLY, CLUSTER_ONLY, api_config, modules_loaded_by_run, run_until


def test_a_static_box_without_api_loads_neither_the_cluster_client_nor_the_web_server(
    tmp_path: Path,
) -> None:
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24]}\n"
        "services: [{name: web, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}]\n"
    )
    loaded = modules_loaded_by_run(config)
    assert "director" in loaded and "pydantic" in loaded, "the import log was read"
    assert loaded.isdisjoint(CLUSTER_ONLY | API_ONLY | {"jinja2"}), sorted(loaded)


def test_a_static_box_with_the_api_loads_the_web_server_but_not_the_cluster_client(
    tmp_path: Path,
) -> None:
    loaded = modules_loaded_by_run(api_config(tmp_path))
    assert loaded >= API_ONLY, sorted(loaded)
    assert loaded.isdisjoint(CLUSTER_ONLY), sorted(loaded & CLUSTER_ONLY)


def test_a_start_logs_where_its_time_went_from_exec_to_the_whole_table(tmp_path: Path) -> None:
    """`event=startup.timing` once the first sync is applied: each phase of the start in
    order, the first sync's own parts, and the total since exec, which the phases add up to
    (an operator comparing starts, and `make bench`, read it)."""
    config = tmp_path / "director.yaml"
    services = "".join(
        f"  - {{name: s{i}, address: 198.51.100.{i + 1}, port: 80, "
        f"real_servers: [192.0.2.1:80, 192.0.2.2:80]}}\n"
        for i in range(20)
    )
    config.write_text(f"ownership: {{networks: [198.51.100.0/24]}}\nservices:\n{services}")
    said = run_until(config, "event=startup.timing")
    timing = next(text for text in said if "event=startup.timing" in text)
    figures = dict(re.findall(r" (\w+)=([0-9.]+)", timing))
    assert list(figures) == [
        "interpreter",
        "imports",
        "config",
        "start",
        "first_sync",
        "first_sync_read",
        "first_sync_translate",
        "first_sync_program",
        "first_sync_publish",
        "total",
    ]
    seconds = {name: float(value) for name, value in figures.items()}
    marks = ("interpreter", "imports", "config", "start", "first_sync")
    assert abs(sum(seconds[m] for m in marks) - seconds["total"]) <= 0.005, seconds
    parts = sum(v for k, v in seconds.items() if k.startswith("first_sync_"))
    assert parts <= seconds["first_sync"] + 0.005, seconds
    assert seconds["interpreter"] > 0 and seconds["imports"] > 0, seconds  # from exec, not main()
