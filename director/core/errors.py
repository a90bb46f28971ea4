"""The one base of the errors the director raises on purpose.

``status`` is the HTTP status an error stands for; the admin API answers with it, mapped in
one place (``director.web.errors``). An error of ours with no status of its own is a 500:
a fault of the director, reported as such."""

from __future__ import annotations


class DirectorError(Exception):
    status: int = 500


# The title of each status the director answers with (RFC 9457's problem details).
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


def problem_document(status: int, detail: str, title: str | None = None) -> dict[str, object]:
    """The body of an ``application/problem+json`` answer (RFC 9457)."""
    return {
        "type": "about:blank",
        "title": title or TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
