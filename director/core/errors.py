"""The one base of the errors the director raises on purpose.

``status`` is the HTTP status an error stands for; the admin API answers with it, mapped in
one place (``director.web.errors``). An error of ours with no status of its own is a 500:
a fault of the director, reported as such."""

from __future__ import annotations


class DirectorError(Exception):
    status: int = 500
