"""``director check``: what ``director run`` would refuse at start (the file, the
kubeconfig), and what it would note, as text or as one JSON object."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from director.cli.plans import EXIT_CONFIG

if TYPE_CHECKING:
    from director.schema.config import ConfigError, KubeSettings, Settings

_log = logging.getLogger("director.cli")


def cmd_check(args: argparse.Namespace) -> int:
    """What run would refuse at start. Text (notes on stdout, the refusal on stderr) or, with
    --json, one object on stdout: {"ok", "config", "kubeconfig", "notes", "error", "errors"}
    ("error": the first fault in the file, "errors": every fault found, the first included)."""
    from director.schema.config import ConfigError

    report: dict[str, Any] = {"ok": True, "config": None, "kubeconfig": None, "notes": []}
    try:
        code = _check(args, report)
    except ConfigError as exc:
        if not args.json:
            raise
        faults = [
            dict(
                zip(("file", "line", "where", "reason"), _fields(fault), strict=True),
                message=str(fault),
            )
            for fault in exc.faults
        ]
        for fault in faults:
            fault["line"] = fault["line"] or None
        report["error"], report["errors"] = faults[0], faults
        code = EXIT_CONFIG
    report["ok"] = code == 0
    if args.json:
        print(json.dumps(report, indent=2))
    return code


def _fields(fault: ConfigError) -> tuple[str, int, str, str]:
    return fault.source, fault.line, fault.where, fault.reason


def _say(args: argparse.Namespace, report: dict[str, Any], line: str, note: bool = False) -> None:
    if note:
        report["notes"].append(line)
    if not args.json:
        print(f"note: {line}" if note else line)


def _refuse(args: argparse.Namespace, report: dict[str, Any], reason: str) -> int:
    report["error"] = {"message": reason}
    if not args.json:
        print(f"director: {reason}", file=sys.stderr)
    return EXIT_CONFIG


def _check(args: argparse.Namespace, report: dict[str, Any]) -> int:
    from director.schema.config import ConfigError, line_of, load_config

    if args.config is None and args.kubeconfig is None:
        return _refuse(args, report, "check needs --config, --kubeconfig or both")
    if getattr(args, "clusters", False) and args.config is None:
        return _refuse(args, report, "--clusters checks the clusters of --config: give it")
    settings: Settings | None = None
    if args.config is not None:
        settings = load_config(args.config)  # parsed afresh: a check writes nothing
        from director.cli.preflight import preflight

        problems, notes = preflight(settings, host=not args.offline)
        if problems:
            faults = [
                ConfigError(settings.source, line_of(settings.source, where), where, why)
                for where, why in problems
            ]
            raise ConfigError(*_fields(faults[0]), also=tuple(faults[1:]))
        dests = sum(len(vs.real_servers) for vs in settings.services.values())
        report["config"] = {
            "file": settings.source,
            "valid": True,
            "services": len(settings.services),
            "real_servers": dests,
        }
        _say(
            args,
            report,
            f"{settings.source}: valid ({len(settings.services)} virtual "
            f"services, {dests} real servers)",
        )
        for note in notes:
            _say(args, report, note, note=True)
    if args.kubeconfig is not None:
        kube = settings.kubernetes if settings is not None else None
        return _check_kubeconfig(args, kube, report)
    if getattr(args, "clusters", False) and settings is not None:
        return _check_clusters(args, settings, report)
    return 0


def _check_clusters(args: argparse.Namespace, settings: Settings, report: dict[str, Any]) -> int:
    """Each cluster's identity: its kubeconfig, and (unless --offline) the Lease in its API
    server. Every cluster is checked; the first refusal is the exit status's."""
    checked: dict[str, Any] = {}
    code = 0
    for kube in settings.served:
        name = kube.cluster or "kubernetes"
        if kube.kubeconfig is None:
            _say(args, report, f"{name}: the pod's service account (not checked here)", note=True)
            continue
        _say(args, report, f"cluster {name}:")
        one: dict[str, Any] = {"ok": True, "notes": []}
        sub = argparse.Namespace(**{**vars(args), "kubeconfig": kube.kubeconfig})
        result = _check_kubeconfig(sub, kube, one)
        checked[name] = {"kubeconfig": one["kubeconfig"], "error": one.get("error")}
        report["notes"] += [f"{name}: {note}" for note in one["notes"]]
        code = code or result
    report["clusters"] = checked
    return code or _one_server_each(args, settings, report)


def _one_server_each(args: argparse.Namespace, settings: Settings, report: dict[str, Any]) -> int:
    """No two clusters' kubeconfigs reach one API server (``run`` refuses it too)."""
    from director.adapters.kube.client import api_client
    from director.daemon.wiring import same_server

    configured = []
    for kube in settings.served:
        if kube.kubeconfig is not None:
            try:
                configured.append((kube.cluster, api_client(kube.kubeconfig).configuration))
            except Exception:  # said by the cluster's own check above
                continue
    said = same_server(configured)
    return 0 if said is None else _refuse(args, report, said)


def _check_kubeconfig(
    args: argparse.Namespace, kube: KubeSettings | None, report: dict[str, Any]
) -> int:
    """The kubeconfig parses; unless --offline, the API server answers and would let this
    director hold the status Lease (a dry run: nothing is written)."""
    from director.adapters.kube.client import FIELD_MANAGER, KubeApi, api_client
    from director.adapters.kube.write import KubeWriter
    from director.schema.config import KubeSettings

    try:  # parses the file and its credentials
        client = api_client(args.kubeconfig)
    except Exception as exc:  # the client raises ConfigException, OSError, YAML errors
        report["kubeconfig"] = {"file": args.kubeconfig, "valid": False}
        return _refuse(args, report, f"invalid kubeconfig {args.kubeconfig}: {exc}")
    checked: dict[str, Any] = {"file": args.kubeconfig, "valid": True, "lease": None}
    report["kubeconfig"] = checked
    _say(args, report, f"{args.kubeconfig}: valid kubeconfig")
    if args.offline:
        return 0
    kube = kube or KubeSettings()
    lease = f"{kube.lease_namespace}/{kube.lease_name}"
    checked["lease"] = {"name": lease, "allowed": None}
    try:
        refusal = KubeWriter(KubeApi(client), FIELD_MANAGER, "check").lease_refusal(
            kube.lease_namespace, kube.lease_name
        )
    except Exception as exc:  # unreachable: the box may not see the cluster yet
        _say(
            args,
            report,
            f"the API server did not answer ({str(exc)[:200]}); the Lease {lease} was not checked",
            note=True,
        )
        return 0
    checked["lease"]["allowed"] = refusal is None
    if refusal is not None:
        return _refuse(args, report, f"the API server refuses the status Lease {lease}: {refusal}")
    _say(args, report, f"the API server would let this director hold the status Lease {lease}")
    return 0
