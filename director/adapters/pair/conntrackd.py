"""conntrackd: render its primary-backup file (pure), have the daemon parse it, keep it true.

conntrackd carries the conntrack table (so full NAT's SNAT mappings) to the peer, where it
goes straight into the kernel's table (no external cache to commit on takeover: between the
VIPs arriving and a commit, the new master's own stack reset the connections whose packets
came first). keepalived's notify commands have the new master send its whole table to the
peer, and the new backup ask for it (``templates/conntrackd-notify.sh``). The IPVS sync
daemon carries IPVS's own connections; with these entries the new master carries a
connection from its first packet.

- ``render_conntrackd``: ``ha.conntrackd`` -> conntrackd.conf, from
  ``templates/conntrackd.conf.j2`` (every value validated by the schema, addresses
  canonical here).
- ``parse_check``: conntrackd's own parser reads a file (``conntrackd -C FILE -s``: it parses
  the file, then asks a running daemon for its figures; "can't connect" means it parsed).
- ``ConntrackdFile``: the director owns the file: written when it differs (after the parse
  check), read back on a schedule, put back when changed or removed. conntrackd reads it
  when it starts; nothing is signalled (the file changes only with ``ha:``, at a restart).
- ``read_stats``: what the running daemon says of itself (``conntrackd -s``): its caches,
  and the messages it failed to send, receive or found lost or malformed (the metrics).
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from director.adapters.render import TEMPLATES, environment
from director.adapters.worker import Keeper, file_drift, install_checked
from director.core.model import Family, canonical_address
from director.core.owned import Ledger, Refused, not_run, run_failure
from director.logs import event
from director.schema.ha import ConntrackdSettings

log = logging.getLogger("director.conntrackd")
_PARSE_ERROR = re.compile(r"parsing config file in line \((\d+)\), symbol '([^']*)': (.*)")
_NOT_RUNNING = "can't connect"


class ConntrackdRejected(Refused):
    """conntrackd's parser refused a rendered file (its own words in the message)."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.line = line  # the file's line it names, if it names one


# The ha.conntrackd field each setting of the file comes from (by its first word).
FIELDS = {
    "IPv4_address": "source",
    "IPv6_address": "source",
    "IPv4_Destination_Address": "peer",
    "IPv6_Destination_Address": "peer",
    "Port": "port",
    "Interface": "interface",
    "LockFile": "lock_file",
    "Path": "socket",
}


def field_at_fault(text: str, exc: ConntrackdRejected) -> str | None:
    """The ha.conntrackd field behind what conntrackd refused in ``text``, if one is."""
    words = str(exc).split()
    if exc.line is not None and 0 < exc.line <= len(text.splitlines()):
        words = text.splitlines()[exc.line - 1].split()[:1]
    return next((FIELDS[w] for w in words if w in FIELDS), None)


def _family(address: str) -> str:
    return "IPv4" if Family.of(address) is Family.INET else "IPv6"


# nf_conntrack_max where it cannot be read (conntrack not loaded yet): the role's floor.
TABLE_MAX = 262144
_TABLE_MAX_FILE = Path("/proc/sys/net/netfilter/nf_conntrack_max")


def box_table_max(path: Path = _TABLE_MAX_FILE) -> int:
    """The most entries this box's conntrack table may hold (``nf_conntrack_max``, which the
    role sizes for the box's memory), or TABLE_MAX where it cannot be read."""
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return TABLE_MAX
    return value if value > 0 else TABLE_MAX


def render_conntrackd(
    ct: ConntrackdSettings,
    source_config: str = "director",
    templates: Path = TEMPLATES,
    *,
    table_max: int = TABLE_MAX,
) -> str:
    """``table_max``: the box's nf_conntrack_max. conntrackd's cache holds up to twice it
    (``HashLimit``, as conntrackd's own documentation asks: entries of closed connections
    wait there to be sent again): a smaller limit leaves every connection past it unsynced,
    and a takeover breaks it."""
    source, peer = canonical_address(ct.source), canonical_address(ct.peer)
    return (
        environment(templates)
        .get_template("conntrackd.conf.j2")
        .render(
            source_config="".join(c if c.isprintable() else "?" for c in source_config)[:200],
            family=_family(source),
            source=source,
            peer=peer,
            port=ct.port,
            interface=ct.interface,
            socket=ct.socket,
            lock_file=ct.lock_file,
            hash_limit=2 * table_max,
            ignore=[{"family": _family(a), "text": a} for a in (source, peer)],
        )
    )


def parse_check(binary: str, path: Path) -> None:
    """conntrackd's parser reads ``path``: raises ConntrackdRejected with its words (the
    file's line) when it refuses it, Transient when conntrackd could not be run."""
    try:
        done = subprocess.run(
            [binary, "-C", str(path), "-s"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise run_failure(binary, exc) from None
    words = done.stderr + done.stdout
    if done.returncode == 0 or _NOT_RUNNING in words:
        return  # parsed: a running daemon answered, or there is none to answer
    failed = not_run(f"{binary} -s", done.returncode, done.stderr)
    if failed is not None:
        raise failed
    match = _PARSE_ERROR.search(words)
    if match:
        line, symbol, why = match.groups()
        raise ConntrackdRejected(f"line {line} of the file, at {symbol!r}: {why}", int(line))
    errors = [ln.split("[ERROR]", 1)[1].strip() for ln in words.splitlines() if "[ERROR]" in ln]
    raise ConntrackdRejected(" | ".join(errors)[-2000:] or f"exited {done.returncode}")


class ConntrackdFile(Keeper[str]):
    """conntrackd.conf, rendered once from ``ha.conntrackd`` and kept as rendered."""

    name = "conntrackd"
    resource = "conntrackd"
    verify_seconds = 5.0

    def __init__(
        self, ct: ConntrackdSettings, source_config: str, ledger: Ledger | None = None
    ) -> None:
        self.ct = ct
        self.path = Path(ct.config_file)
        self.text = render_conntrackd(ct, source_config, table_max=box_table_max())
        super().__init__(ledger)

    def start(self) -> None:
        super().start()
        self.submit(self.text)

    def install(self, value: str) -> None:
        if not install_checked(self.path, value, self._checked, mode=0o644):
            return
        event(
            log,
            "conntrackd.config_written",
            file=str(self.path),
            effect="conntrackd reads it when it next starts",
        )

    def _checked(self, candidate: Path) -> None:
        try:
            parse_check(self.ct.conntrackd, candidate)
        except ConntrackdRejected as exc:
            event(
                log,
                "conntrackd.config_rejected",
                level=logging.ERROR,
                file=str(candidate),
                conntrackd=str(exc),
            )
            raise

    def verify(self, value: str) -> str | None:
        return file_drift(self.path, value)


@dataclass(frozen=True)
class ConntrackdStats:
    """conntrackd's own figures (``conntrackd -s``): this box's connections in its internal
    cache (sent to the peer), cache operations that failed, the peer's connections the
    kernel refused to take (``external inject``, or the external cache where one is kept),
    and its sync channel's messages that failed to go out or in, or came malformed or with a
    gap in their sequence (lost: missing here until the next resync)."""

    internal: int
    cache_failed: int
    inject_failed: int
    send_errors: int
    recv_errors: int
    malformed: int
    lost: int


_SECTION = re.compile(r"^(cache internal|cache external|external inject):")
_ACTIVE = re.compile(r"current active connections:\s+(\d+)")
_FAILED = re.compile(r"failed:\s+(\d+)")
_ERRORS = re.compile(r"(\d+) Error send\s+(\d+) Error recv")
# 1.4.x says "Malformed msgs ... Lost msgs"; older ones "Pckts mfrm ... Pckts lost"
_SEQUENCE = re.compile(r"(\d+) (?:Malformed msgs|Pckts mfrm)\s+(\d+) (?:Lost msgs|Pckts lost)")


def parse_stats(text: str) -> ConntrackdStats | None:
    """``conntrackd -s``'s report: a section a cache (``cache internal:``, and ``external
    inject:`` or ``cache external:``), one a sync channel, the message tracking; None when
    it holds no internal cache (not a sync daemon's report)."""
    internal: int | None = None
    failed = {"cache internal": 0, "cache external": 0, "external inject": 0}
    send = recv = malformed = lost = 0
    section = ""
    for line in text.splitlines():
        header = _SECTION.match(line.strip())
        if header:
            section = header.group(1)
            continue
        if not line.strip():
            section = ""
        found = _ACTIVE.search(line)
        if found and section == "cache internal":
            internal = int(found.group(1))
        found = _FAILED.search(line)
        if found and section:
            failed[section] += int(found.group(1))
        found = _ERRORS.search(line)
        if found:
            send, recv = send + int(found.group(1)), recv + int(found.group(2))
        found = _SEQUENCE.search(line)
        if found:
            malformed, lost = malformed + int(found.group(1)), lost + int(found.group(2))
    if internal is None:
        return None
    return ConntrackdStats(
        internal,
        failed["cache internal"],
        failed["external inject"] + failed["cache external"],
        send,
        recv,
        malformed,
        lost,
    )


def read_stats(binary: str, path: Path) -> ConntrackdStats | None:
    """The running conntrackd's figures, or None when none answers (not running, not
    started yet on this box, or its socket refused us): the metric says it is down."""
    try:
        done = subprocess.run(
            [binary, "-C", str(path), "-s"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_stats(done.stdout)
