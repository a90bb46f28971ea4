"""The daemons' templates (``templates/``: keepalived's and conntrackd's files, FRR's, the
scripts keepalived runs) and the one jinja2 environment that renders them. The templates hold
only layout: every value is validated by the adapter that fills them in."""

from __future__ import annotations

from pathlib import Path

import jinja2

# Installed from a wheel, templates/ sits inside the package (director/templates); in the
# source tree it is the top-level templates/ folder.
_PACKAGE = Path(__file__).resolve().parents[1]  # director/
TEMPLATES = next(
    (d for d in (_PACKAGE / "templates", _PACKAGE.parent / "templates") if d.is_dir()),
    _PACKAGE.parent / "templates",
)


def environment(templates: Path = TEMPLATES) -> jinja2.Environment:
    """Not HTML: nothing is escaped; a name the template uses and the values lack fails."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
