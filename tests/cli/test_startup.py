"""Where a start's time went, logged from exec to the whole table in the kernel (the
interpreter, imports, the file, the first read and programming)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_main import run_until


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
