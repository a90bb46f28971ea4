"""The admin API's paths, declared once: the routes are registered with them and the
command-line client fills them in (quoted), so a renamed route cannot leave the client
calling the old path."""

from __future__ import annotations

from pathlib import Path

from director.cli import main as cli


def test_the_client_and_the_routes_share_one_spelling_of_each_path() -> None:
    """`director ctl` and `bundle` fill in the rules the API's routes are registered with
    (director.schema.paths): a renamed route cannot leave the client calling the old path."""
    from director.schema import paths
    from director.web.app import create_app  # noqa: F401  (registers every route)
    from director.web.registry import OPERATIONS

    assert {op.rule for op in OPERATIONS} == set(paths.ALL)
    for module in ("ctl.py", "client.py", "bundle.py"):
        text = (Path(cli.__file__).parent / module).read_text()
        assert "/api/v1" not in text, module
    assert paths.url(paths.SERVICE_SCHEDULER, namespace="shop", name="a/b") == (
        "/api/v1/services/shop/a%2Fb/scheduler"
    )
