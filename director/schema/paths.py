"""The admin API's paths, declared once: the routes are registered with these rules
(``director.web``) and the command-line client fills them in (``director.cli.ctl``). Plain
strings, no library: ``director status`` stays light."""

from __future__ import annotations

import re

STATUS = "/api/v1/status"
PLAN = "/api/v1/plan"
BGP = "/api/v1/bgp"
MAINTENANCE = "/api/v1/maintenance"
SERVICES = "/api/v1/services"
SERVICE = "/api/v1/services/<namespace>/<name>"
SERVICE_SCHEDULER = "/api/v1/services/<namespace>/<name>/scheduler"
STATIC = "/api/v1/static/<name>"
STATIC_SCHEDULER = "/api/v1/static/<name>/scheduler"
DRAINS = "/api/v1/drains"
DRAIN = "/api/v1/drains/<id>"
OPENAPI = "/api/v1/openapi.json"  # the document of the others

ALL = (
    STATUS,
    PLAN,
    BGP,
    MAINTENANCE,
    SERVICES,
    SERVICE,
    SERVICE_SCHEDULER,
    STATIC,
    STATIC_SCHEDULER,
    DRAINS,
    DRAIN,
)


def url(rule: str, **values: str) -> str:
    """``rule`` with each ``<parameter>`` replaced by its value, quoted for a path segment.
    A parameter missing from ``values`` is a KeyError: a bug, not a request."""
    from urllib.parse import quote  # here: every command builds ctl's parser with these

    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: quote(values[m[1]], safe=""), rule)
