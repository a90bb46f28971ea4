"""What ``director run`` would refuse at start, found before it starts: the admin token,
the TLS pair, the intents file, the listen address, the FIFO. Light: ``director check``
imports neither the Kubernetes client nor Flask.
"""

from __future__ import annotations

import ipaddress
import os
import socket

from director.daemon.token import read_token
from director.schema.config import Settings
from director.schema.notes import bgp_notes, snat_notes

Problem = tuple[str, str]  # the field at fault (api.listen), and what is wrong with it


def _problem(where: str, text: str) -> Problem:
    """(where, the reason): ``text`` without its leading field name."""
    return where, text.removeprefix(where).lstrip(" :") or text


def preflight(settings: Settings, *, host: bool = True) -> tuple[list[Problem], list[str]]:
    """What ``director run`` would refuse at start, found before: (problems, notes).

    Files: the token (one line, usable), the TLS pair (loads), the intents file (reads), the
    FIFO (not a regular file). With ``host``: the API's listen address is one of this box's
    (a port in use is only a note: the running director holds it)."""
    problems: list[Problem] = []
    notes: list[str] = []
    api = settings.api
    if api is not None:  # ssl and the intents' reader: a file without api: loads neither
        import errno
        import ssl
        from pathlib import Path

        from director.core.intents import Intents

        try:
            read_token(api.token_file)
        except ValueError as exc:
            problems.append(_problem("api.token_file", str(exc)))
        if api.tls_cert and api.tls_key:
            try:
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                    api.tls_cert, api.tls_key
                )
            except (OSError, ValueError) as exc:
                problems.append(("api.tls_cert", f"cannot load it with api.tls_key: {exc}"))
        try:
            Intents.load(Path(api.intents_file))
        except ValueError as exc:
            problems.append(("api.intents_file", str(exc)))
        if host:
            family = socket.AF_INET6 if ":" in api.host else socket.AF_INET
            for port in (0, api.port) if api.port else (0,):
                with socket.socket(family, socket.SOCK_STREAM) as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        probe.bind((api.host, port))
                    except OSError as exc:
                        where = f"api.listen {api.host}:{api.port}"
                        if exc.errno == errno.EADDRINUSE:
                            notes.append(
                                f"{where}: the port is in use now (by a running "
                                "director, or it will not start)"
                            )
                        else:
                            why = f"{where}: {exc.strerror or exc}"
                            problems.append(_problem("api.listen", why))
                        break
    notes += bgp_notes(settings) + snat_notes(settings)
    notes += _unheld(settings, host)
    if host and settings.snat is not None:
        floating = {gw[0] for gw in settings.ha.gateways} if settings.ha else set()
        away = [a for a in settings.snat.addresses if a not in floating and not _local(a)]
        if away:
            notes.append(
                f"snat.addresses {', '.join(away)}: not this box's address now; "
                "full-NAT replies come back to it only once it is (add it to the "
                "interface facing the nodes)"
            )
    problems += _kubeconfig(settings)
    if settings.ha is not None:
        found, said = _pair(settings)
        problems += found
        notes += said
    if host:
        problems += _interfaces(settings) + _own_in_pools(settings)
    return problems, notes


def _interfaces(settings: Settings) -> list[Problem]:
    """Every interface the pair's files name exists on this box: keepalived refuses a file
    that names one that does not, and every later change of VIPs with it."""
    ha = settings.ha
    if ha is None:
        return []
    named: list[tuple[str, str]] = [("ha.interface", ha.interface)]
    named += [(f"ha.track_interfaces[{i}]", n) for i, n in enumerate(ha.track_interfaces)]
    if ha.sync_interface:
        named.append(("ha.sync_interface", ha.sync_interface))
    named += [(f"ha.gateways[{i}].interface", g[2]) for i, g in enumerate(ha.gateways)]
    if ha.conntrackd is not None:
        named.append(("ha.conntrackd.interface", ha.conntrackd.interface))
    problems: list[Problem] = []
    for where, name in named:
        try:
            socket.if_nametoindex(name)
        except OSError:
            problems.append((where, f"{name}: no such interface on this box"))
    return problems


def _own_in_pools(settings: Settings) -> list[Problem]:
    """A pool never holds one of this box's own addresses, even one the file does not name
    (its management address on eth0): a tenant's Service given it could take the box's own
    ports (SSH). Floating gateways are the pair's, not the box's, and are left out."""
    if not settings.pools:
        return []
    from director.adapters.box import read_addresses

    own = read_addresses() or {}
    floating = {gw[0] for gw in settings.ha.gateways} if settings.ha else set()
    problems: list[Problem] = []
    for index, pool in enumerate(settings.pools):
        held = sorted(
            a for a in own if a not in floating and pool.contains(ipaddress.ip_address(a))
        )
        if held:
            named = ", ".join(f"{a} ({own[a]})" for a in held)
            problems.append(
                (
                    f"pools[{index}].addresses",
                    f"holds {named}, this box's own address: a Service would be given it, "
                    "and could take the box's ports",
                )
            )
    return problems


def _pair(settings: Settings) -> tuple[list[Problem], list[str]]:
    """The FIFO is one (or nothing yet); conntrackd's parser takes its file."""
    import stat

    assert settings.ha is not None
    problems: list[Problem] = []
    notes: list[str] = []
    fifo = settings.ha.fifo
    if os.path.exists(fifo) and not stat.S_ISFIFO(os.lstat(fifo).st_mode):
        problems.append(("ha.fifo", f"{fifo} exists and is not a FIFO (it would not be replaced)"))
    if settings.ha.conntrackd is not None:
        found, said = _conntrackd(settings)
        problems += found
        notes += said
    return problems, notes


def _conntrackd(settings: Settings) -> tuple[list[Problem], list[str]]:
    """conntrackd's own parser reads the file this box would give it."""
    import shutil
    import tempfile
    from pathlib import Path

    from director.adapters.pair.conntrackd import (
        ConntrackdRejected,
        box_table_max,
        field_at_fault,
        parse_check,
        render_conntrackd,
    )
    from director.core.owned import Transient

    assert settings.ha is not None and settings.ha.conntrackd is not None
    ct = settings.ha.conntrackd
    if shutil.which(ct.conntrackd) is None:
        return [], [
            f"ha.conntrackd: {ct.conntrackd} is not installed here: its file was not "
            "checked by conntrackd itself"
        ]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "conntrackd.conf"
        text = render_conntrackd(ct, settings.source, table_max=box_table_max())
        path.write_text(text)
        try:
            parse_check(ct.conntrackd, path)
        except ConntrackdRejected as exc:
            field = field_at_fault(text, exc)
            where = "ha.conntrackd" + (f".{field}" if field else "")
            return [(where, f"conntrackd refuses the file it would be given: {exc}")], []
        except Transient as exc:
            return [], [f"ha.conntrackd: the file was not checked by conntrackd: {exc}"]
    return [], []


def _unheld(settings: Settings, host: bool) -> list[str]:
    """Addresses nothing will make local on this box. IPVS serves a VIP only where it is one
    of the box's addresses; keepalived (``ha:``) adds the VRRP pools' and the static services',
    FRR's part (``bgp:``) the BGP pools'. Without ``ha:`` a VRRP pool's addresses are never
    added; a static VIP must then be there already (with ``host``: it is looked for)."""
    if settings.ha is not None:
        return []
    notes: list[str] = []
    vrrp = [pool.name for pool in settings.pools if not pool.announce.bgp]
    if vrrp:
        notes.append(
            f"pools {', '.join(vrrp)}: their addresses are made local by the VRRP pair, and this "
            "file has no ha: section, so nothing on this box will answer for them; add ha: (the "
            "pair), or announce them with announce: bgp and a bgp: section"
        )
    if host:
        bgp = settings.bgp_pools
        missing = sorted(
            {
                key.address
                for key in settings.services
                if not key.fwmark
                and not any(p.contains(ipaddress.ip_address(key.address)) for p in bgp)
                and not _local(key.address)
            }
        )
        if missing:
            shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
            notes.append(
                f"{len(missing)} static service address(es) ({shown}) are not this box's, "
                "and without ha: nothing will add them: IPVS serves an address only where it is "
                "local (add them to an interface, or add ha:)"
            )
    return notes


def _local(address: str) -> bool:
    """Is ``address`` one of this box's (can a socket be bound to it)?"""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def _kubeconfig(settings: Settings) -> list[Problem]:
    """Each cluster's credentials ``run`` will load: the kubeconfig file, readable, or (none
    given) a pod's service account."""
    problems: list[Problem] = []
    for index, kube in enumerate(settings.served):
        where = f"clusters[{index}].kubeconfig" if kube.cluster else "kubernetes.kubeconfig"
        if kube.kubeconfig is None:
            if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(IN_CLUSTER_TOKEN):
                continue
            problems.append(
                (
                    where,
                    "not set, and this is not a Kubernetes pod (no "
                    "service account to fall back on): set it to the director's kubeconfig",
                )
            )
            continue
        try:
            with open(kube.kubeconfig, "rb"):
                pass
        except OSError as exc:
            problems.append((where, f"{kube.kubeconfig}: {exc.strerror or exc}"))
    return problems
