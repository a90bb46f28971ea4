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
"""

from __future__ import annotations

import logging
import re
import subprocess
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


def render_conntrackd(
    ct: ConntrackdSettings, source_config: str = "director", templates: Path = TEMPLATES
) -> str:
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
        self.text = render_conntrackd(ct, source_config)
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
