"""The admin API's client, shared by ``director ctl``, ``director status`` and the support
bundle: where the director listens and with what token and CA (the options, else the
``api:`` section of ``--config``, else ``$DIRECTOR_URL``, ``$DIRECTOR_TOKEN`` or
``$DIRECTOR_TOKEN_FILE``), one request at a time, and the exit status each answer means.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Protocol

from director.core.errors import DirectorError

DEFAULT_URL = "http://127.0.0.1:9180"


# Exit statuses of `director status` and `director ctl` (scripts tell them apart).
EXIT_REFUSED = 1  # a wrong request, or one the director refused (400, 404, 409)
EXIT_CHANGES = 2  # `ctl plan --exit-code`: changes are pending
EXIT_UNREACHABLE = 5  # no answer from the director (not running, wrong URL, timeout)
EXIT_UNAUTHORISED = 6  # no token, or one the director does not take (401, 403)
EXIT_UNAVAILABLE = 7  # the director could not do it now (5xx: busy, loop not taking changes)


class CtlError(DirectorError):
    """What ``director ctl`` says went wrong (the API's answer, or the command's words),
    with the exit status that tells a script which kind of failure it was."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="the director's configuration file: the API's address, "
        "token file and certificate are read from its api: section",
    )
    parser.add_argument(
        "--url",
        help=f"the admin API (default: from --config, else $DIRECTOR_URL, else {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token-file",
        help="file holding the API token (default: from --config, "
        "else $DIRECTOR_TOKEN or $DIRECTOR_TOKEN_FILE)",
    )
    parser.add_argument(
        "--ca-file",
        help="CA bundle for an https URL with a private CA (default: from --config, api.tls_cert)",
    )
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


class ApiSection(Protocol):
    """What a client needs of the configuration's ``api:`` section."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def token_file(self) -> str: ...
    @property
    def tls_cert(self) -> str | None: ...


def from_section(args: argparse.Namespace, api: ApiSection) -> None:
    """Fill the address, token file and CA the options left out from an ``api:`` section.
    A director listening on every address (0.0.0.0, ::) is asked on loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(api.host, api.host)
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if api.tls_cert else "http"
    args.url = args.url or f"{scheme}://{host}:{api.port}"
    args.token_file = args.token_file or api.token_file
    args.ca_file = args.ca_file or api.tls_cert


def resolve(args: argparse.Namespace) -> None:
    """The options, then ``--config``'s ``api:`` section, then the environment."""
    config = getattr(args, "config", None)
    if config:
        from director.schema.config import ConfigError, load_config

        try:
            settings = load_config(config)
        except ConfigError as exc:
            raise CtlError(f"invalid configuration: {exc}") from None
        if settings.api is None:
            raise CtlError(f"{config}: no api: section, so the director serves no admin API")
        from_section(args, settings.api)
    args.url = args.url or os.environ.get("DIRECTOR_URL", DEFAULT_URL)


def token(args: argparse.Namespace) -> str:
    path = args.token_file or None
    if path is None and os.environ.get("DIRECTOR_TOKEN"):
        return os.environ["DIRECTOR_TOKEN"].strip()
    path = path or os.environ.get("DIRECTOR_TOKEN_FILE")
    if not path:
        raise CtlError(
            "no token: use --token-file, $DIRECTOR_TOKEN or $DIRECTOR_TOKEN_FILE", EXIT_UNAUTHORISED
        )
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError as exc:
        raise CtlError(
            f"cannot read the token file {path}: {exc.strerror}", EXIT_UNAUTHORISED
        ) from None


def call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    import ssl  # here: the other commands (check at start of a big file) do not pay for them
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(args.url.rstrip("/") + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token(args)}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except ValueError:
            detail = ""
        code = (
            EXIT_UNAUTHORISED
            if exc.code in (401, 403)
            else EXIT_UNAVAILABLE
            if exc.code >= 500
            else EXIT_REFUSED
        )
        raise CtlError(f"{method} {path}: HTTP {exc.code}: {detail or exc.reason}", code) from None
    except (urllib.error.URLError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CtlError(
            f"cannot reach the director at {args.url}: {reason}", EXIT_UNREACHABLE
        ) from None
