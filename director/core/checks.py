"""What to check of a real server, and its up/down state machine. Pure.

A check is TCP connect, or an HTTP(S) GET whose status must be expected (default 200-399),
sent to the real server's address; with a host name (``https://www.example.com/ready``) the
request names it in ``Host`` and, over TLS, in SNI, as a virtual-hosted backend needs.
A real server goes down after ``fall`` failures in a row and comes back after ``rise``
successes; it starts up (serving something beats serving nothing while the first results
come in). ``director.adapters.prober`` runs the checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from director.core.model import format_endpoint, shown

KINDS = ("tcp", "http", "https")


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """How a real server is checked: the kind, the path and answer wanted, and the timings."""

    kind: str = "tcp"  # tcp | http | https
    path: str = "/"
    expect: tuple[int, int] = (200, 399)  # inclusive status range
    interval: float = 2.0
    timeout: float = 1.0
    rise: int = 2
    fall: int = 3
    host: str | None = None  # the virtual host: Host header and TLS SNI (else ADDRESS:PORT)


@dataclass(frozen=True, slots=True)
class Target:
    """One thing to check: an address and port, with how."""

    address: str
    port: int
    spec: CheckSpec

    def describe(self) -> str:
        where = format_endpoint(self.address, self.port)
        if self.spec.kind == "tcp":
            return f"tcp {where}"
        host = f" (host {self.spec.host})" if self.spec.host else ""
        return f"{self.spec.kind} {where}{self.spec.path}{host}"


# A DNS name (RFC 1123 labels), as a Host header and SNI carry it: no address, no port.
_HOST = re.compile(r"(?=.{1,253}\Z)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*\.?")


def parse_check(text: str, base: CheckSpec) -> CheckSpec | str:
    """``tcp``, ``http``, ``http:/healthz``, ``https:/ready``, ``https://www.example.com/ready``
    (a virtual host) -> a spec, or why not."""
    kind, _, path = text.strip().partition(":")
    if kind not in KINDS:
        return (
            f"{shown(text)}: the check must be one of tcp, http[:/path], https[:/path], "
            "http[s]://HOST[/path]"
        )
    if kind == "tcp" and path:
        return f"{shown(text)}: a tcp check takes no path"
    host = None
    if path.startswith("//"):
        host, slash, rest = path[2:].partition("/")
        path = slash + rest
        if not _HOST.fullmatch(host.lower()) or host.replace(".", "").isdigit():
            return (
                f"{shown(text)}: the host must be a DNS name (www.example.com), sent as "
                "Host and SNI; the check goes to each real server's own address"
            )
        host = host.lower().rstrip(".")
    if path and (not path.startswith("/") or not all(33 <= ord(c) < 127 for c in path)):
        return f"{shown(text)}: the path must start with / and hold no spaces (ASCII, %-encoded)"
    return CheckSpec(
        kind,
        path or base.path,
        base.expect,
        base.interval,
        base.timeout,
        base.rise,
        base.fall,
        host,
    )


@dataclass(slots=True)
class Health:
    """A target's state: ``up`` changes after ``fall`` failures / ``rise`` successes."""

    up: bool = True
    successes: int = 0
    failures: int = 0
    last: str = "not checked yet"
    last_at: float = 0.0
    last_seconds: float = 0.0
    checks: int = 0

    def observe(self, ok: bool, reason: str, spec: CheckSpec, now: float, seconds: float) -> bool:
        """Fold one result in; True when ``up`` changed."""
        self.last, self.last_at, self.last_seconds = reason, now, seconds
        self.checks += 1
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if not self.up and self.successes >= spec.rise:
                self.up = True
                return True
        else:
            self.failures, self.successes = self.failures + 1, 0
            if self.up and self.failures >= spec.fall:
                self.up = False
                return True
        return False
