"""The ``director`` command: the composition root, the one place real adapters are built.

Each command imports what it uses when it runs: ``director status`` and ``director ctl`` (an
operator's quick look) load neither the configuration's schema (pydantic) nor the engine."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from director import __version__, logs
from director.cli import ctl
from director.cli.plans import EXIT_FAILED_OPS, open_ipvs, plan_json, print_plan
from director.cli.startup import STARTUP
from director.dataplane.interface import IpvsUnavailable

if TYPE_CHECKING:
    from director.cli.runtime import Runtime
    from director.schema.config import ConfigError, KubeSettings, Settings
    from director.schema.reparse import Reparser

_log = logging.getLogger("director.cli")
DESCRIPTION = (
    "An IPVS load balancer (LVS director) for on-prem Kubernetes and for services declared by "
    "hand: it programs the kernel's virtual services, keeps them true, and fails over with "
    "keepalived or scales out behind BGP."
)
EPILOG = (
    "Start with `director check --config FILE`; `director COMMAND --help` for each command. "
    "The README and docs/ describe the configuration, the admin API and operating it."
)
EXIT_CONFIG = 2
SHOWN_FAULTS = 20  # faults of an invalid file printed (check --json lists them all)
EXIT_NO_IPVS = 3
EXIT_FATAL = 4  # a thread the director needs died: systemd restarts it


def cmd_plan(args: argparse.Namespace, apply: bool) -> int:
    from director.engine.reconcile import Reconciler
    from director.schema.config import load_config

    settings = load_config(args.config)
    ipvs = open_ipvs(args.netns)
    try:
        reconciler = Reconciler(ipvs, settings.ownership, dry_run=not apply)
        report = reconciler.full_sync(settings.services)
    finally:
        ipvs.close()
    if args.json:
        print(plan_json(report.plan))
    else:
        print_plan(settings, report.plan, "Applied" if apply else "Plan for")
    if apply:
        for failure in report.result.errors:
            print(f"FAILED {failure.describe()}", file=sys.stderr)
        if report.result.errors:
            return EXIT_FAILED_OPS
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """The appliance: follow the cluster until SIGTERM/SIGINT; SIGHUP reloads the file."""
    import signal

    from director.cli.runtime import Runtime
    from director.dataplane.fake import FakeIpvs
    from director.schema.config import ConfigError
    from director.schema.notes import bgp_notes, snat_notes
    from director.schema.reparse import Reparser

    STARTUP.mark("imports")
    config_reader = Reparser()  # reads the file again, on SIGHUP, at the cost of the edit
    cache = _config_cache(args.config_cache)
    settings = config_reader.load(args.config, cache)
    STARTUP.mark("config")

    for note in bgp_notes(settings) + snat_notes(settings):
        logs.event(_log, "config.note", level=logging.WARNING, note=note)
    try:
        ipvs = open_ipvs(args.netns)
    except IpvsUnavailable as exc:
        if not args.dry_run:
            raise
        # A shadow on a host without IPVS plans against an empty table.
        logs.event(_log, "ipvs.unavailable_shadow", reason=str(exc))
        ipvs = FakeIpvs()
    # The main thread sleeps until a signal (or a fatal fault) wakes it: SIGTERM/SIGINT stop,
    # SIGHUP reloads (systemctl reload: ExecReload=kill -HUP), without polling.
    asked, wake = set[str](), _Wake()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: asked.add("stop"))
    signal.signal(signal.SIGHUP, lambda *_: asked.add("reload"))
    # The API and the metrics read through their own socket (no waiting on the loop's).
    reader = (
        open_ipvs(args.netns)
        if settings.api is not None and not isinstance(ipvs, FakeIpvs)
        else None
    )
    try:
        runtime = Runtime(
            settings,
            ipvs,
            reader=reader,
            dry_run=args.dry_run,
            state_file=Path(args.state_file) if args.state_file else None,
            kubeconfig=args.kubeconfig,
            netns=args.netns,
            on_fatal=lambda _reason: wake.ask(asked, "stop"),
        )
        STARTUP.mark("start")
        runtime.controller.exports.on_ready = _timed_ready(
            runtime, runtime.controller.exports.on_ready, _keeper(config_reader, cache)
        )
        runtime.start()
    except ValueError as exc:  # a token file, a kubeconfig, the API's address, the FIFO
        raise ConfigError(settings.source, 0, "", str(exc)) from None
    try:
        while "stop" not in asked:
            wake.wait()
            if "reload" in asked and "stop" not in asked:
                asked.discard("reload")
                runtime.reload(args.config, config_reader)
                _keeper(config_reader, cache)()  # the parse of the file now running
    finally:
        runtime.stop()
        wake.close()
        ipvs.close()
        if reader is not None:
            reader.close()
    if runtime.failed is not None:
        print(f"director: stopped: {runtime.failed}", file=sys.stderr)
        return EXIT_FATAL
    return 0


class _Wake:
    """What wakes ``director run``'s main thread: a signal (the kernel's wakeup byte through
    Python's wakeup fd; the handler itself only notes what was asked, and so never waits on
    a lock the interrupted main thread holds, as ``Event.set()`` in a handler can: that
    deadlock left a SIGTERM unanswered), or another thread's ``ask``."""

    def __init__(self) -> None:
        import signal

        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous = signal.set_wakeup_fd(self._write)

    def wait(self) -> None:
        """Until a signal or an ``ask`` (the caller looks at what was asked)."""
        os.read(self._read, 512)

    def ask(self, asked: set[str], what: str) -> None:
        asked.add(what)
        with contextlib.suppress(BlockingIOError):  # full: it will wake anyway
            os.write(self._write, b"\0")

    def close(self) -> None:
        import signal

        signal.set_wakeup_fd(self._previous)
        os.close(self._read)
        os.close(self._write)


def _checked_file(path: str, load: Callable[[str], Settings]) -> Settings:
    """The file check validates: parsed, or (in a unit with a state directory: the unit's
    ExecStartPre) taken from the cache when the cache holds this very file, which is
    then kept there for the start that follows."""
    from director.schema.cache import default_path
    from director.schema.reparse import Reparser

    cache = default_path()
    if cache is None:
        return load(path)
    reader = Reparser()
    settings = reader.load(path, cache)
    reader.save(cache)
    return settings


def _config_cache(given: str | None) -> Path | None:
    """``--config-cache``: a path, '' for none, unset for systemd's state directory's."""
    from director.schema.cache import default_path

    if given is None:
        return default_path()
    return Path(given) if given else None


def _keeper(reader: Reparser, cache: Path | None) -> Callable[[], None]:
    """What keeps the file's parse for the next start: a write on a thread of its own (the
    loop and the reload go on meanwhile); nothing without a cache."""
    import threading

    def keep() -> None:
        if cache is not None:
            threading.Thread(
                target=reader.save, args=(cache,), name="config-cache", daemon=True
            ).start()

    return keep


def _timed_ready(
    runtime: Runtime, ready: Callable[[str], None] | None, then: Callable[[], None]
) -> Callable[[str], None]:
    """``ready``, and then (the loop's own thread, once the first sync is applied) where the
    start's time went, since exec, and ``then``."""

    def timed(message: str) -> None:
        if ready is not None:
            ready(message)
        STARTUP.mark("first_sync")
        first_sync = runtime.controller.programmer.first_sync_phases
        phases = {f"first_sync_{name}": seconds for name, seconds in first_sync}
        logs.event(_log, "startup.timing", fields=STARTUP.figures(**phases))
        then()

    return timed


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
    settings: Settings | None = None
    if args.config is not None:
        settings = _checked_file(args.config, load_config)
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
    return 0


def _check_kubeconfig(
    args: argparse.Namespace, kube: KubeSettings | None, report: dict[str, Any]
) -> int:
    """The kubeconfig parses; unless --offline, the API server answers and would let this
    director hold the status Lease (a dry run: nothing is written)."""
    from director.adapters.kube import FIELD_MANAGER, KubeApi, api_client
    from director.adapters.kube_write import KubeWriter
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


def cmd_keepalived_config(args: argparse.Namespace) -> int:
    """keepalived.conf for the static services' VIPs: what an edge box starts with before
    the director's first sync (the director rewrites it with every VIP set change)."""
    from director.adapters.keepalived import render_keepalived
    from director.schema.config import load_config

    settings = load_config(args.config)
    if settings.ha is None:  # a valid file: a box that runs no VRRP pair
        print(
            f"director: {settings.source} is valid but has no ha: section: there is no "
            "keepalived.conf to render for a box that runs no VRRP pair",
            file=sys.stderr,
        )
        return 1
    vips = {key.address for key in settings.services if not key.fwmark}
    sys.stdout.write(render_keepalived(settings.ha, vips, settings.source))
    return 0


def cmd_conntrackd_config(args: argparse.Namespace) -> int:
    """conntrackd.conf for this box's half of the pair (ha.conntrackd): what conntrackd
    starts with on a new box (the director keeps the file as rendered from then on)."""
    from director.adapters.conntrackd import render_conntrackd
    from director.schema.config import load_config

    settings = load_config(args.config)
    if settings.ha is None or settings.ha.conntrackd is None:
        print(
            f"director: {settings.source} is valid but has no ha.conntrackd section: this "
            "box runs no conntrackd",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(render_conntrackd(settings.ha.conntrackd, settings.source))
    return 0


def cmd_schedulers(args: argparse.Namespace) -> int:
    from director.dataplane.kernel import offered_schedulers

    offered = sorted(offered_schedulers())
    if not offered:  # as plan and apply say it: exit 3, one sentence
        raise IpvsUnavailable(
            "this kernel offers no IPVS scheduler (built without IPVS, or "
            "its modules are not installed)"
        )
    print(json.dumps({"schedulers": offered}) if args.json else " ".join(offered))
    return 0


def cmd_metallb_pools(args: argparse.Namespace) -> int:
    from director.schema.metallb import convert

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        converted = convert(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"director: {args.file}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    sys.stdout.write(converted.text(args.file))
    return 0 if converted.pools else EXIT_CONFIG


def _operations(sub: Any) -> None:
    """The commands for running a box over the years: decommission, a support bundle, the
    way in from MetalLB, shell completion."""
    p = sub.add_parser(
        "decommission",
        help="take this box out of service for good: remove the IPVS services it owns (never "
        "a foreign one), its nftables table and its BGP VIPs on lo; the director must be "
        "stopped; without --yes, only say what would go",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p.add_argument("--netns", help="the IPVS of this network namespace")
    p.add_argument("--yes", action="store_true", help="remove it (without: only show)")
    p = sub.add_parser(
        "bundle",
        help="write a support bundle (tar.gz) for a bug report: the configuration with "
        "secrets redacted, status and plan from the API, the IPVS table, sysctls, keepalived's "
        "and FRR's files, recent logs; changes nothing",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p.add_argument("--out", help="the file to write (default: director-bundle-HOST-TIME.tar.gz)")
    p.add_argument("--lines", type=int, default=2000, help="journal lines per unit")
    p.add_argument("--url", help="the admin API (default: from the configuration)")
    p.add_argument("--token-file", help="the API token (default: from the configuration)")
    p.add_argument("--ca-file", help="CA for an https API (default: api.tls_cert)")
    p = sub.add_parser(
        "metallb-pools",
        help="print a pools: section made from MetalLB's IPAddressPool and advertisement "
        "objects (kubectl get ipaddresspools,l2advertisements,bgpadvertisements -n "
        "metallb-system -o yaml); what does not carry over is said in notes",
    )
    p.add_argument("file", help="the YAML (- for standard input)")
    p = sub.add_parser(
        "completion",
        help='print shell completion: eval "$(director completion bash)" in ~/.bashrc (zsh: '
        "the same in ~/.zshrc)",
    )
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete for")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="director", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"director {__version__}")
    parser.add_argument(
        "--log-level", help="DEBUG, INFO, WARNING, ERROR (default: INFO for run, else WARNING)"
    )
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default="logfmt",
        help="logfmt (default) or json, one line per event",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("plan", "print what apply would change, changing nothing"),
        ("apply", "apply the configuration to the kernel once"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", required=True, help="the director's YAML configuration")
        p.add_argument("--netns", help="operate on the IPVS of this network namespace")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    p = sub.add_parser("run", help="run the director: follow the cluster, program IPVS")
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p.add_argument("--netns", help="program the IPVS of this network namespace")
    p.add_argument("--kubeconfig", help="overrides kubernetes.kubeconfig of the config")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="shadow mode: write nothing to the kernel or the cluster, log what would change",
    )
    p.add_argument("--state-file", help="keep the desired table (JSON) current in this file")
    p.add_argument(
        "--config-cache",
        help="keep the parsed file here, and start from it while the file and the director are "
        "unchanged (default: config.cache in systemd's $STATE_DIRECTORY; '' for none)",
    )
    ctl.build(sub)
    p = sub.add_parser("check", help="validate a configuration file (and a kubeconfig) and exit")
    p.add_argument("--config", help="the director's YAML configuration to validate")
    p.add_argument("--kubeconfig", help="also check that this kubeconfig loads")
    p.add_argument(
        "--offline",
        action="store_true",
        help="skip what only the box itself can tell (the API's listen address is one of its "
        "own): for building an image",
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object: what was checked, notes, refusal"
    )
    p = sub.add_parser(
        "keepalived-config",
        help="print this director's keepalived.conf for its static VIPs (the Ansible role "
        "installs it once, checked with keepalived -t; the director rewrites it from then on)",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p = sub.add_parser(
        "conntrackd-config",
        help="print this director's conntrackd.conf (ha.conntrackd; the Ansible role installs "
        "it once, the director keeps it as rendered from then on)",
    )
    p.add_argument("--config", required=True, help="the director's YAML configuration")
    p = sub.add_parser("schedulers", help="list the IPVS schedulers this kernel offers")
    p.add_argument("--json", action="store_true", help='{"schedulers": [...]}')
    sub.add_parser(
        "schema",
        help="print the configuration file's JSON Schema (for editors and CI; the same "
        "schema director check applies)",
    )
    _operations(sub)
    for command in sub.choices.values():  # the logging options after the command too
        command.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.add_argument(
            "--log-format", choices=logs.FORMATS, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.setup(args.log_level or ("INFO" if args.command == "run" else "WARNING"), args.log_format)
    if args.command in ("ctl", "status"):  # the light commands: no schema, no engine
        return ctl.main_ctl(args)
    from director.schema.config import ConfigError, json_schema_text

    try:
        if args.command in ("plan", "apply"):
            return cmd_plan(args, apply=args.command == "apply")
        simple = {
            "run": cmd_run,
            "check": cmd_check,
            "keepalived-config": cmd_keepalived_config,
            "conntrackd-config": cmd_conntrackd_config,
            "metallb-pools": cmd_metallb_pools,
        }
        if args.command in simple:
            return simple[args.command](args)
        if args.command == "decommission":
            from director.cli.decommission import cmd_decommission

            return cmd_decommission(args)
        if args.command == "bundle":
            from director.cli.bundle import cmd_bundle

            return cmd_bundle(args)
        if args.command == "completion":
            from director.cli.completion import script

            sys.stdout.write(script(build_parser(), args.shell))
            return 0
        if args.command == "schema":
            sys.stdout.write(json_schema_text())
            return 0
        return cmd_schedulers(args)
    except ConfigError as exc:
        for fault in exc.faults[:SHOWN_FAULTS]:
            print(f"director: invalid configuration: {fault}", file=sys.stderr)
        if len(exc.faults) > SHOWN_FAULTS:
            print(
                f"director: and {len(exc.faults) - SHOWN_FAULTS} more faults in the file "
                "(director check --json lists them all)",
                file=sys.stderr,
            )
        return EXIT_CONFIG
    except IpvsUnavailable as exc:
        print(f"director: {exc}.", file=sys.stderr)
        return EXIT_NO_IPVS


if __name__ == "__main__":
    sys.exit(main())
