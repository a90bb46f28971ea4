"""``director bundle``: what a bug report needs, in one tar.gz. The configuration with its
secrets redacted, the running director's status and plan (from its API), the kernel's IPVS
table and sysctls, keepalived's and FRR's rendered files, and the recent journal. Each part
that cannot be had (no API, no ipvsadm, no journal) is named in MANIFEST with the reason; the
bundle is written anyway. Nothing is changed on the box."""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import socket
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from director import __version__
from director.cli import client
from director.schema import paths
from director.schema.config import ConfigError, Settings, load_config
from director.schema.yamldoc import secret_values

REDACTED = "<redacted>"


def redact(text: str) -> str | None:
    """The configuration file as written, every secret's value replaced wherever it appears
    (the values are found by reading the file as YAML, so no spelling hides one); comments
    and layout kept, so line numbers in errors still match. None when the file is not YAML:
    its secrets cannot be found, and it is left out."""
    secrets = secret_values(text)
    if secrets is None:
        return None
    for value in sorted(secrets, key=len, reverse=True):
        before = r"(?<![\w-])" if value[0].isalnum() or value[0] in "_-" else ""
        after = r"(?![\w-])" if value[-1].isalnum() or value[-1] in "_-" else ""
        text = re.sub(before + re.escape(value) + after, REDACTED, text)
    return text


def _redact_frr(text: str) -> str:
    """FRR's configuration with ``neighbor X password Y`` lines' passwords replaced."""
    return re.sub(r"^(\s*neighbor\s+\S+\s+password\s+)\S+", rf"\g<1>{REDACTED}", text, flags=re.M)


def _run(argv: list[str], timeout: float = 30) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout


def _api(args: argparse.Namespace, settings: Settings | None, path: str) -> str:
    if settings is None or settings.api is None:
        raise OSError("no api: section in the configuration")
    query = argparse.Namespace(
        url=args.url, token_file=args.token_file, ca_file=args.ca_file, json=True
    )
    client.from_section(query, settings.api)
    try:
        return json.dumps(client.call(query, "GET", path), indent=2) + "\n"
    except client.CtlError as exc:
        raise OSError(str(exc)) from None


def collect(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """(file name -> content, manifest lines)."""
    parts: dict[str, str] = {}
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest = [
        f"director {__version__} bundle, {when}, host {socket.gethostname()}, {platform.platform()}"
    ]
    settings: Settings | None = None
    config = Path(args.config)

    def part(name: str, get: Callable[[], str]) -> None:
        try:
            parts[name] = get()
            manifest.append(f"ok      {name}")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            manifest.append(f"missing {name}: {str(exc)[:300]}")

    part("config/director.yaml", lambda: _redacted(config))
    try:
        settings = load_config(str(config))
        manifest.append("ok      the configuration is valid")
    except ConfigError as exc:
        manifest.append(f"invalid the configuration: {exc}")
    part("api/status.json", lambda: _api(args, settings, paths.STATUS))
    part("api/plan.json", lambda: _api(args, settings, paths.PLAN))
    part("api/bgp.json", lambda: _api(args, settings, paths.BGP))
    part("kernel/ipvsadm-Ln.txt", lambda: _run(["ipvsadm", "-Ln", "--stats"]))
    part("kernel/ipvsadm-daemon.txt", lambda: _run(["ipvsadm", "-Ln", "--daemon"]))
    part("kernel/sysctl-net.ipv4.vs.txt", lambda: _run(["sysctl", "net.ipv4.vs"]))
    part("kernel/nf_conntrack-stat.txt", lambda: Path("/proc/net/stat/nf_conntrack").read_text())
    part("kernel/uname.txt", lambda: " ".join(platform.uname()) + "\n")
    if settings is not None and settings.ha is not None:
        ha = settings.ha
        part("keepalived/keepalived.conf", lambda: Path(ha.config_file).read_text())
        ct = ha.conntrackd
        if ct is not None:
            part("conntrackd/conntrackd.conf", lambda: Path(ct.config_file).read_text())
            part("conntrackd/stats.txt", lambda: _run([ct.conntrackd, "-C", ct.config_file, "-s"]))
    if settings is not None and settings.bgp is not None:
        bgp = settings.bgp  # FRR's file holds the peers' passwords: redacted too
        part("frr/frr.conf", lambda: _redact_frr(Path(bgp.config_file).read_text()))
    for unit in ("director", "keepalived", "conntrackd", "frr"):
        part(f"journal/{unit}.log", _journal(unit, args.lines))
    return parts, manifest


def _redacted(config: Path) -> str:
    text = redact(config.read_text())
    if text is None:
        raise ValueError("not YAML: left out, since its secrets cannot be told apart")
    return text


def _journal(unit: str, lines: int) -> Callable[[], str]:
    return lambda: _run(
        ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"]
    )


def write(path: Path, parts: dict[str, str], manifest: list[str]) -> None:
    """The bundle, readable by its owner alone (an existing file too: its mode is set, not
    kept; the bundle is for the project, not for every user of the box)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, text in [("MANIFEST", "\n".join(manifest) + "\n"), *sorted(parts.items())]:
            data = text.encode()
            info = tarfile.TarInfo(f"director-bundle/{name}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))


def cmd_bundle(args: argparse.Namespace) -> int:
    parts, manifest = collect(args)
    out = Path(args.out or f"director-bundle-{socket.gethostname()}-{int(time.time())}.tar.gz")
    write(out, parts, manifest)
    print(out)
    for line in manifest[1:]:
        if not line.startswith("ok"):
            print(f"  {line}")
    return 0
