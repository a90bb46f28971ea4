"""Errors as ``application/problem+json``, mapped in one place: a ``Problem`` carries its
HTTP status, werkzeug's own errors keep theirs, anything else is a 500 that says where to
look (the traceback is logged, never sent)."""

from __future__ import annotations

import logging

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from director.core.errors import TITLES, DirectorError, problem_document
from director.logs import event

log = logging.getLogger("director.api")


class Problem(DirectorError):
    """An answer of the admin API other than success: its status and why."""

    def __init__(self, status: int, detail: str, title: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.title = status, detail, title


def problem(status: int, detail: str, title: str | None = None) -> Response:
    response = jsonify(problem_document(status, detail, title))
    response.status_code = status
    response.mimetype = "application/problem+json"
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="director"'
    return response


def register(app: Flask, max_body: int) -> None:
    @app.errorhandler(DirectorError)
    def _refused(exc: DirectorError) -> Response:
        return problem(exc.status, str(exc), getattr(exc, "title", None))

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        status = exc.code or 500
        detail = exc.description or TITLES.get(status, "error")
        if status == 413:
            detail = f"the request body is larger than {max_body} bytes"
        response = problem(status, detail)
        if status == 405 and exc.get_response().headers.get("Allow"):
            response.headers["Allow"] = exc.get_response().headers["Allow"]
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:  # pragma: no cover - a bug, reported as such
        event(log, "api.error", level=logging.ERROR, path=request.path, error=repr(exc)[:300])
        return problem(500, "internal error; see the director's log (event=api.error)")
