"""`make boot-test` (issue 14): the box the Ansible role makes, booted for real.

The role-provisioned Debian root becomes a disk image (lab/bootlab.py) and boots in qemu
(software emulation) with systemd as PID 1, the lab VM's kernel, and nothing applied by
hand: the hardened director.service and keepalived start from the role's units, the IPVS
modules and sysctls come from modules-load.d and sysctl.d. A client and two backends are
namespaces of this machine on the box's two networks. The tests run in order on one boot
(and one reboot), and print what they measure.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from director import __version__
from lab import bootlab, debroot
from lab.bootlab import (
    API,
    BACKENDS,
    EDGE_VIP,
    FRONT,
    NAT_PORT,
    NODE_PORT,
    TOKEN,
    VIP,
    Box,
    Responder,
    router_nexthops,
)
from lab.kubeapi import FakeApiServer, node, service
from lab.netns import Connection, Netns, ask_tcp
from lab.wait import wait_for

pytestmark = pytest.mark.boot
DIRECTOR = "/opt/director/bin/director"


class Lab:
    def __init__(self, box: Box, net: Netns, be: Netns, api: FakeApiServer) -> None:
        self.box, self.net, self.be, self.api = box, net, be, api
        self.booted_in = 0.0


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    log = bootlab.WORK / "ansible.log"
    started = time.monotonic()
    bootlab.build(log)
    took = time.monotonic() - started
    print(f"\nboot: image built (debootstrap, the role, mke2fs) in {took:.0f}s")
    with bootlab.network() as (net, be), bootlab.router(net):
        api = FakeApiServer(host=bootlab.KUBE, token=bootlab.KUBE_TOKEN)
        api.port = bootlab.KUBE_PORT
        be.call(api.start)  # listening in boot-be, where the box's kubeconfig points
        responder = Responder(be, BACKENDS, (NAT_PORT, NODE_PORT))
        edge = Responder(be, (EDGE_VIP,), (NAT_PORT,), name="edge")  # direct routing
        for index, address in enumerate(BACKENDS, 1):
            api.create("nodes", node(f"node{index}", address))
        box = Box(net)
        try:
            booted = box.up()
            assert booted is not None, f"the box never came up; see {box.console}"
            result = Lab(box, net, be, api)
            result.booted_in = booted
            print(f"boot: systemd up and the guest agent answering {booted:.0f}s after power-on")
            yield result
        finally:
            box.close()
            responder.close()
            edge.close()
            api.stop()


def test_director_and_keepalived_run_and_no_unit_failed(lab: Lab) -> None:
    lab.box.settled()
    active = lab.box.sh("systemctl is-active director keepalived conntrackd").split()
    assert active == ["active"] * 3, lab.box.sh(
        "journalctl -b -u director -u conntrackd -n 80", check=False
    )
    # conntrackd runs from the file the director keeps (ha.conntrackd), and answers.
    assert lab.box.sh("conntrackd -C /etc/conntrackd/conntrackd.conf -s").strip()
    failed = lab.box.sh("systemctl --failed --no-legend --plain").strip()
    assert failed == "", failed
    assert lab.box.sh("systemctl is-system-running").strip() == "running"
    ready = lab.box.sh("systemctl show -p Type -p NotifyAccess -p WatchdogUSec director")
    assert "Type=notify" in ready and "WatchdogUSec=30s" in ready


def test_modules_and_sysctls_are_live_from_the_roles_files(lab: Lab) -> None:
    modules = lab.box.sh("cat /proc/modules").split("\n")
    loaded = {line.split()[0] for line in modules if line}
    wanted = lab.box.sh("grep -v '^#' /etc/modules-load.d/director.conf").split()
    assert set(wanted) <= loaded, set(wanted) - loaded
    for name, value in (
        ("net.ipv4.ip_forward", "1"),
        ("net.ipv4.vs.conntrack", "0"),
        ("net.ipv4.vs.expire_nodest_conn", "1"),
        ("net.ipv4.vs.sync_threshold", "3\t10"),
    ):
        live = lab.box.sh(f"cat /proc/sys/{name.replace('.', '/')}").strip()
        assert live == value, (name, live)


def test_the_static_service_is_programmed_and_a_client_reaches_its_vip(lab: Lab) -> None:
    table = lab.box.sh("ipvsadm -Ln")
    assert f"TCP  {VIP}:80 rr" in table and f"{BACKENDS[0]}:{NAT_PORT}" in table, table
    assert wait_for(lambda: VIP in lab.box.sh("ip -o addr show dev eth0"), 60) is not None
    answers = {ask_tcp(lab.net, VIP, 80, timeout=10) for _ in range(6)}
    print(f"\nboot: {VIP}:80 answered by {sorted(answers)}")
    assert answers == {"be1", "be2"}


def test_status_and_metrics_answer_with_the_roles_token(lab: Lab) -> None:
    """`director status` with the role's token: ready once everything the director writes
    reads back in sync. Right after the boot the first FRR configuration may still be on its
    way in (frr-reload.py takes up to a minute emulated, and status says so): waited for."""

    def status() -> str:
        return lab.box.sh(f"{DIRECTOR} status --url {API} --token-file /etc/director/api-token")

    said: list[str] = []
    became = wait_for(lambda: said.append(status()) or "ready:       yes" in said[-1], 300, 2.0)
    assert became is not None and "kubernetes:  connected" in said[-1], said[-1]
    metrics = lab.box.sh(
        f"python3 -c \"import urllib.request as u; r = u.Request('{API}/metrics', "
        f"headers={{'Authorization': 'Bearer {TOKEN}'}}); print(u.urlopen(r).read().decode())\""
    )
    assert 'director_ipvs_backend_weight{local_address="203.0.113.100"' in metrics
    closed = lab.box.sh(
        f"python3 -c \"import urllib.request as u; u.urlopen('{API}/metrics')\"", check=False
    )
    assert "401" in closed, "the role's examples keep /metrics behind the token"


def test_a_vip_change_reaches_keepalived_through_the_hardened_unit(lab: Lab) -> None:
    obj = service("web", [("http", "TCP", 80)])
    obj["spec"]["ports"][0]["nodePort"] = NODE_PORT
    lab.api.create("services", obj)
    vip = wait_for(
        lambda: lab.api.get("services", "web")["status"]["loadBalancer"].get("ingress"), 120
    )
    assert vip is not None, lab.box.sh("journalctl -b -u director -n 40")
    address = lab.api.get("services", "web")["status"]["loadBalancer"]["ingress"][0]["ip"]
    held = wait_for(lambda: address in lab.box.sh("ip -o addr show dev eth0"), 120)
    journal = lab.box.sh("journalctl -b -u director -o cat | grep -E 'event=keepalived' || true")
    assert held is not None, journal
    assert "event=keepalived.reloaded" in journal and "config_rejected" not in journal, journal
    assert "keepalived.conf" in lab.box.sh("ls /etc/keepalived")
    # The reload kept keepalived's scripts: the alive check, conntrackd's notify commands.
    reloaded = lab.box.sh("journalctl -b -u keepalived -o cat")
    assert "Reload complete" in reloaded and "default user" not in reloaded, reloaded[-3000:]
    answers = {ask_tcp(lab.net, address, 80, timeout=10) for _ in range(6)}
    print(
        f"\nboot: the Service's address {address} on the box after {held:.1f}s "
        f"(render, keepalived -t in the sandbox, SIGHUP); answered by {sorted(answers)}"
    )
    assert answers == {"be1", "be2"}


def test_the_journal_has_the_events_and_the_unit_is_hardened(lab: Lab) -> None:
    journal = lab.box.sh("journalctl -b -u director -o cat")
    for name in ("controller.ready", "kube.listed", "lease.changed", "ipvs.applied"):
        assert f"event={name}" in journal, name
    security = lab.box.sh("systemd-analyze security director.service", check=False)
    level = re.search(r"Overall exposure level for director.service: ([\d.]+) (\w+)", security)
    assert level, security[-2000:]
    print(
        f"\nboot: systemd-analyze security director.service on the booted box (conntrackd "
        f"beside it): {level.group(1)} {level.group(2)}"
    )
    assert float(level.group(1)) <= 3.0


def test_the_router_learns_the_bgp_vip_from_the_hardened_unit_and_traffic_follows(lab: Lab) -> None:
    """FRR installed and run by the role; the sandboxed director writes frr.conf, FRR
    announces the VIP, the router (FRR in boot-net) installs it, a client reaches it along
    that route through IPVS (direct routing). Both kinds of pool on one box."""
    learned = wait_for(lambda: FRONT in router_nexthops(lab.net), 300, step=2.0)
    journal = lab.box.sh("journalctl -b -u director -o cat | grep -E 'event=(frr|bgp)' || true")
    assert learned is not None, journal + lab.box.sh("vtysh -c 'show bgp summary'", check=False)
    assert "event=frr.reloaded" in journal and "config_rejected" not in journal, journal
    assert "sysctl.not_set" not in lab.box.sh("journalctl -b -u director -o cat")
    assert "router_id: 203.0.113.10" in lab.box.sh("cat /etc/director/director.yaml")
    for name in ("sloppy_tcp", "sloppy_sctp"):
        assert lab.box.sh(f"cat /proc/sys/net/ipv4/vs/{name}").strip() == "1", name
    assert lab.box.sh("systemctl is-active frr").strip() == "active"
    answers = {ask_tcp(lab.net, EDGE_VIP, NAT_PORT, timeout=10) for _ in range(4)}
    reloads = [line for line in journal.splitlines() if "event=frr.reloaded" in line]
    print(
        f"\nboot: the router learned {EDGE_VIP} via {FRONT} {learned:.0f}s into the test; "
        f"{reloads[0] if reloads else ''}; a client through that route answered by "
        f"{sorted(answers)}"
    )
    assert answers == {"edge"}
    assert lab.box.sh("ls -l /etc/frr/frr.conf").split()[3] == "frr", "FRR can read it"


def test_systemctl_stop_withdraws_the_route_before_the_director_exits(lab: Lab) -> None:
    """The documented stop with BGP: withdraw every route, wait leave_seconds, exit; IPVS
    and FRR stay. A start announces the VIP again."""
    assert FRONT in router_nexthops(lab.net)
    before = lab.box.sh("ipvsadm -Sn")
    started = time.monotonic()
    lab.box.sh("systemctl stop director", timeout=300)
    stopped = time.monotonic() - started
    hops = router_nexthops(lab.net)
    journal = lab.box.sh("journalctl -u director -o cat -n 200 | grep -E 'event=bgp.left'")
    print(
        f"\nboot: systemctl stop director took {stopped:.1f}s; the router's next hops for "
        f"{EDGE_VIP} after it: {hops}; {journal.strip().splitlines()[-1]}"
    )
    assert hops == [], "the route was withdrawn before the director exited"
    assert "withdrawn=True" in journal.splitlines()[-1], journal
    assert lab.box.sh("ipvsadm -Sn") == before, "IPVS kept: connections drain elsewhere"
    assert lab.box.sh("systemctl is-active frr").strip() == "active"
    lab.box.sh("systemctl start director")
    back = wait_for(lambda: FRONT in router_nexthops(lab.net), 300, step=1.0)
    print(f"boot: systemctl start director: announced again after {back}s")
    assert back is not None


def writes_since(lab: Lab, since: str) -> list[str]:
    """The director's kernel writes logged since ``since`` (one line each)."""
    text = lab.box.sh(
        f"journalctl -u director --since '{since}' -o cat | "
        "grep -E 'event=ipvs[.](change|applied)' || true"
    )
    return [line for line in text.splitlines() if line]


def test_a_restart_writes_nothing_and_an_open_connection_survives(lab: Lab) -> None:
    conn = Connection(lab.net, VIP, 80, timeout=30)
    first = conn.ask()
    since = lab.box.sh("date '+%Y-%m-%d %H:%M:%S'").strip()
    started = time.monotonic()
    lab.box.sh("systemctl restart director")  # returns once READY=1: the first sync is done
    print(f"\nboot: systemctl restart director: ready again in {time.monotonic() - started:.1f}s")
    assert lab.box.sh("systemctl is-active director").strip() == "active"
    assert writes_since(lab, since) == [], "zero netlink writes on start"
    assert conn.ask() == first, "the open connection carried on, to the same backend"
    conn.close()


def test_another_release_and_back_with_director_release_touch_nothing(lab: Lab) -> None:
    """The box holds two releases (the image was provisioned with the next one, then this
    tree's): going to the other and back restarts the director each time, writes nothing
    to IPVS, and an open connection carries on."""
    tool = "/usr/local/sbin/director-release"
    nxt = debroot.next_release()
    listed = lab.box.sh(f"{tool} list").splitlines()
    assert sorted(listed) == sorted([f"* {__version__}", f"  {nxt}"]), listed
    conn = Connection(lab.net, VIP, 80, timeout=30)
    first = conn.ask()
    since = lab.box.sh("date '+%Y-%m-%d %H:%M:%S'").strip()
    try:
        for release in (nxt, __version__):
            started = time.monotonic()
            said = lab.box.sh(f"{tool} use {release}", timeout=300)
            took = time.monotonic() - started
            print(f"\nboot: director-release use {release}: running it {took:.1f}s later")
            assert "the director was restarted" in said, said
            assert lab.box.sh(f"{DIRECTOR} --version").strip() == f"director {release}"
            assert lab.box.sh("systemctl is-active director").strip() == "active"
            assert conn.ask() == first, "the open connection carried on, to the same backend"
        assert writes_since(lab, since) == [], "zero netlink writes going and coming back"
    finally:
        conn.close()


def test_systemctl_reload_applies_a_one_line_change_and_refuses_a_bad_file(lab: Lab) -> None:
    conf = "/etc/director/director.yaml"
    lab.box.sh(f"cp -p {conf} /root/director.yaml.orig")
    conn = Connection(lab.net, VIP, 80, timeout=30)
    first = conn.ask()
    scheduler = f"TCP  {VIP}:80 "

    def reload(to: str) -> float | None:
        started = time.monotonic()
        lab.box.sh("systemctl reload director")
        done = wait_for(lambda: scheduler + to in lab.box.sh("ipvsadm -Ln"), 60)
        return None if done is None else time.monotonic() - started

    try:
        since = lab.box.sh("date '+%Y-%m-%d %H:%M:%S'").strip()
        lab.box.sh(f"sed -i 's/scheduler: rr/scheduler: wlc/' {conf}")
        took = reload("wlc")
        journal = lab.box.sh(f"journalctl -u director --since '{since}' -o cat")
        assert took is not None, journal[-3000:]
        print(
            f"\nboot: systemctl reload director: the new scheduler in the kernel {took:.1f}s "
            "after the reload began"
        )
        assert "event=config.reloaded" in journal and "changed=1" in journal, journal[-3000:]
        changes = [w for w in writes_since(lab, since) if "event=ipvs.change " in w]
        assert len(changes) == 1 and "scheduler=wlc" in changes[0], changes
        assert conn.ask() == first, "the open connection carried on through the reload"
        assert lab.box.sh("systemctl is-active director").strip() == "active"

        # A file the director refuses: nothing changes, it says why at priority err.
        lab.box.sh(f"sed -i 's/scheduler: wlc/scheduler: fastest/' {conf}")
        lab.box.sh("systemctl reload director")
        refused = wait_for(
            lambda: (
                "event=config.reload_refused"
                in lab.box.sh(f"journalctl -u director -p err --since '{since}' -o cat")
            ),
            60,
        )
        assert refused is not None, lab.box.sh("journalctl -u director -n 20 -o cat")
        line = lab.box.sh(
            f"journalctl -u director -p err --since '{since}' -o cat | grep config.reload_refused"
        )
        assert "result=invalid" in line and "fastest" in line, line
        assert scheduler + "wlc" in lab.box.sh("ipvsadm -Ln")
        assert lab.box.sh("systemctl is-active director").strip() == "active"
        assert conn.ask() == first
    finally:
        lab.box.sh(f"cp -p /root/director.yaml.orig {conf}")
        back = reload("rr")
        conn.close()
    assert back is not None, "the original file did not come back on reload"


SCHED_IDLE = 5  # the list processes' scheduling policy (sched(7))


def _unit_processes(lab: Lab) -> dict[int, tuple[int, int]]:
    """Every process of director.service (its cgroup): its nice value and its scheduling
    policy."""
    group = lab.box.sh("systemctl show -p ControlGroup --value director").strip()
    listed = lab.box.sh(
        f"for p in $(cat /sys/fs/cgroup{group}/cgroup.procs); do "
        # nice and policy are the 19th and 41st fields of /proc/PID/stat, the 17th and the
        # 39th after the name's ") "
        "echo \"$p $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f17,39)\"; done",
        check=False,
    )
    return {
        int(pid): (int(nice), int(policy))
        for pid, nice, policy in (
            line.split() for line in listed.splitlines() if len(line.split()) == 3
        )
        if nice.lstrip("-").isdigit() and policy.isdigit()
    }


def _logged_pids(lab: Lab, since: str, pattern: str) -> list[int]:
    """The ``pid=`` of each journal line of the director's matching ``pattern`` since
    ``since``, in order."""
    said = lab.box.sh(
        f"journalctl -u director --since '{since}' -o cat | grep -E '{pattern}' || true"
    ).split()
    return [int(word[4:]) for word in said if word.startswith("pid=")]


def _programmed(lab: Lab, api: FakeApiServer, name: str) -> str | None:
    """The address ``name`` was given in ``api``'s cluster, once the box's kernel serves it."""
    status = api.get("services", name)["status"]["loadBalancer"].get("ingress") or []
    address = status[0]["ip"] if status else None
    if address is None or f"TCP  {address}:80 " not in lab.box.sh("ipvsadm -Ln"):
        return None
    return str(address)


def test_two_clusters_listed_by_processes_under_the_hardened_unit(lab: Lab) -> None:
    """`clusters:` with the default intake (each list decoded by a process made for it,
    forked by a zygote, SCHED_IDLE at nice 19) under the role's unit as it is:
    SystemCallFilter=@system-service, RestrictAddressFamilies, NoNewPrivileges. The file goes
    from `kubernetes:` to two clusters (a second API stand-in) and the unit is restarted (a
    reload cannot make the zygote). kill -9 of staging's list processes mid-relist: the lists
    are taken again and a change only a list sees arrives; kill -9 of the zygote: the
    director's watchdog sees it gone, the director stops and systemd starts it afresh."""
    conf = "/etc/director/director.yaml"
    staging = FakeApiServer(host=bootlab.KUBE, token=bootlab.KUBE_TOKEN)
    staging.port = bootlab.KUBE_PORT + 1
    lab.be.call(staging.start)
    for index, address in enumerate(BACKENDS, 1):
        staging.create("nodes", node(f"node{index}", address))
    lab.box.sh(f"cp -p {conf} /root/director.yaml.one-cluster")
    lab.box.sh(
        "cp -p /etc/director/kubeconfig /etc/director/kubeconfig-staging && sed -i "
        f"'s/:{bootlab.KUBE_PORT}/:{staging.port}/' /etc/director/kubeconfig-staging"
    )
    two = (
        "clusters:\\n- name: staging\\n  kubeconfig: /etc/director/kubeconfig-staging\\n"
        "  lease_namespace: lvs-director\\n  identity: edge1\\n  lease_seconds: 5\\n"
        "- name: prod"
    )
    try:
        # The `kubernetes:` section's keys become the prod cluster's (same indentation).
        lab.box.sh(f"sed -i 's|^kubernetes:$|{two}|' {conf}")
        assert "- name: prod" in lab.box.sh(f"cat {conf}")
        lab.box.sh(f"{DIRECTOR} check --config {conf}")
        since = lab.box.sh("date '+%Y-%m-%d %H:%M:%S'").strip()
        started = time.monotonic()
        lab.box.sh("systemctl restart director", timeout=300)
        print(f"\nboot: restarted with two clusters, ready in {time.monotonic() - started:.1f}s")
        assert lab.box.sh("systemctl is-active director").strip() == "active"
        main = int(lab.box.sh("systemctl show -p MainPID --value director").strip())
        (zygote,) = _logged_pids(lab, since, "event=kube.intake_zygote_started")
        first = "event=kube.listed resource=(staging|prod)/"
        wait_for(lambda: len(_logged_pids(lab, since, first)) >= 6, 120, step=2.0)
        listers = _logged_pids(lab, since, first)
        print(f"boot: the zygote {zygote}; the first lists' processes {listers}")
        assert len(listers) == 6 and not {main, zygote} & set(listers), listers
        assert _unit_processes(lab).get(zygote) == (0, 0), "the zygote runs in the unit"

        # A Service of each cluster programmed, each cluster's status in its own API.
        web = wait_for(lambda: _programmed(lab, lab.api, "web"), 120, step=2.0)
        obj = service("api", [("http", "TCP", 80)])
        obj["spec"]["ports"][0]["nodePort"] = NODE_PORT
        staging.create("services", obj)
        took = wait_for(lambda: _programmed(lab, staging, "api"), 180, step=2.0)
        assert took is not None and web is not None, lab.box.sh(
            "journalctl -u director -n 60 -o cat"
        )
        given = _programmed(lab, staging, "api")
        assert given is not None and given != _programmed(lab, lab.api, "web")
        print(f"boot: staging's Service got {given} and reached the kernel in {took:.1f}s")

        # staging relists (410 Gone), its lists held by its server; a change meanwhile
        # only a list can see; kill -9 of the list processes.
        staging.hold_lists()
        staging.expire_watches()

        def listing() -> list[int]:  # the list processes under way: SCHED_IDLE, nice 19
            return sorted(p for p, n in _unit_processes(lab).items() if n == (19, SCHED_IDLE))

        held = wait_for(lambda: len(listing()) == 3, 120, step=1.0)  # one per resource
        killed = listing()
        assert held is not None, lab.box.sh("journalctl -u director -n 40 -o cat")
        obj = service("db", [("pg", "TCP", 80)])
        obj["spec"]["ports"][0]["nodePort"] = NODE_PORT
        staging.create("services", obj)
        lab.box.sh(f"kill -9 {' '.join(map(str, killed))}")
        failed = wait_for(
            lambda: (
                "its list process ended before the list did"
                in lab.box.sh(f"journalctl -u director --since '{since}' -o cat")
            ),
            120,
            step=2.0,
        )
        assert failed is not None
        assert _answers(lab) and _programmed(lab, staging, "api") == given, "all kept serving"
        staging.hold_lists(False)
        took = wait_for(lambda: _programmed(lab, staging, "db"), 180, step=2.0)
        assert took is not None, lab.box.sh("journalctl -u director -n 60 -o cat")
        print(
            f"boot: kill -9 of staging's list processes {killed} mid-relist: the lists taken "
            f"again, and the Service made meanwhile in the kernel {took:.1f}s after release"
        )
        assert int(lab.box.sh("systemctl show -p MainPID --value director").strip()) == main

        # kill -9 of the zygote: no list could be taken again; the director's watchdog sees
        # it gone (no relist needed) and stops the director; systemd starts it afresh.
        restarts = int(lab.box.sh("systemctl show -p NRestarts --value director").strip())
        lab.box.sh(f"kill -9 {zygote}")
        new = wait_for(
            lambda: (
                lab.box.sh("systemctl show -p MainPID --value director").strip()
                not in (str(main), "0")
            ),
            180,
            step=2.0,
        )
        journal = lab.box.sh(f"journalctl -u director --since '{since}' -o cat")
        said = f"zygote that forks the list processes (pid {zygote}) ended"
        assert new is not None and said in journal, journal[-3000:]
        active = wait_for(
            lambda: lab.box.sh("systemctl is-active director", check=False).strip() == "active",
            180,
            step=2.0,
        )
        assert active is not None
        after = int(lab.box.sh("systemctl show -p NRestarts --value director").strip())
        assert after == restarts + 1, (restarts, after)
        print(
            f"boot: kill -9 of the zygote: the director stopped, systemd restarted it {new:.0f}s on"
        )
        assert _programmed(lab, staging, "db") is not None and _answers(lab)
    finally:
        staging.hold_lists(False)
        lab.box.sh(f"cp -p /root/director.yaml.one-cluster {conf}")
        lab.box.sh("systemctl restart director", timeout=300)
        staging.stop()
    left = _unit_processes(lab)
    assert (19, SCHED_IDLE) not in left.values(), f"no list process with kubernetes: ({left})"


def test_the_watchdog_restarts_a_director_whose_loop_stopped(lab: Lab) -> None:
    pid = lab.box.sh("systemctl show -p MainPID --value director").strip()
    restarts = int(lab.box.sh("systemctl show -p NRestarts --value director").strip())
    lab.box.sh(f"kill -STOP {pid}")  # wedged: the loop no longer steps, no ping reaches systemd
    stopped = time.monotonic()
    new = wait_for(
        lambda: lab.box.sh("systemctl show -p MainPID --value director").strip() not in (pid, "0"),
        120,
        step=2.0,
    )
    assert new is not None, lab.box.sh("journalctl -b -u director -n 30 -o cat")
    print(
        f"\nboot: SIGSTOP of the director: systemd's watchdog restarted it after "
        f"{time.monotonic() - stopped:.0f}s (WatchdogSec=30)"
    )
    journal = lab.box.sh("journalctl -b -u director -o cat")
    assert "Watchdog timeout" in journal or "watchdog timeout" in journal.lower()
    assert int(lab.box.sh("systemctl show -p NRestarts --value director").strip()) == restarts + 1
    active = wait_for(
        lambda: lab.box.sh("systemctl is-active director", check=False).strip() == "active", 120
    )
    assert active is not None
    assert ask_tcp(lab.net, VIP, 80, timeout=10) in ("be1", "be2")


def test_stop_leaves_the_table_as_documented(lab: Lab) -> None:
    before = lab.box.sh("ipvsadm -Sn")
    lab.box.sh("systemctl stop director")
    assert lab.box.sh("ipvsadm -Sn") == before, "stopping never flushes what it programmed"
    assert ask_tcp(lab.net, VIP, 80, timeout=10) in ("be1", "be2"), "traffic flows without it"
    lab.box.sh("systemctl start director")


def test_a_reboot_comes_back_serving_with_no_operator_action(lab: Lab) -> None:
    before = lab.box.boot_id()
    lab.box.reboot()
    back = wait_for(lambda: lab.box.boot_id() not in ("", before), 600, step=2.0)
    assert back is not None, f"the box did not come back; see {lab.box.console}"
    lab.box.settled()
    active = lab.box.sh("systemctl is-active director keepalived conntrackd").split()
    assert active == ["active"] * 3
    served = wait_for(lambda: _answers(lab), 120, step=2.0)
    assert served is not None
    print(
        f"\nboot: rebooted, and serving {VIP} again {back + served:.0f}s after the reboot "
        "began, with no operator action"
    )
    ready = lab.box.sh(
        f'python3 -c "import urllib.request as u; '
        f"print(u.urlopen('{API}/readyz').read().decode())\""
    )
    assert json.loads(ready)["status"] == "ready"


def _answers(lab: Lab) -> bool:
    try:
        return ask_tcp(lab.net, VIP, 80, timeout=5) in ("be1", "be2")
    except OSError:
        return False
