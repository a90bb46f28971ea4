"""``director check``: what run would refuse, every fault with its line and field, the
notes, and the kubeconfig's identity asked of the API server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from director.cli import main as cli
from tests.cli.test_main import EXAMPLE, api_config


def test_check_validates_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--config", EXAMPLE]) == 0
    assert "valid (8 virtual services, 24 real servers)" in capsys.readouterr().out


def test_an_invalid_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - address: 198.51.100.1\n    port: 99999\n")
    assert cli.main(["plan", "--config", str(bad)]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"{bad}:3: services[0].port: must be an integer between 1 and 65535" in err


def test_check_a_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good"
    good.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://192.0.2.1:6443'}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    assert cli.main(["check", "--offline", "--kubeconfig", str(good)]) == 0
    assert capsys.readouterr().out.strip() == f"{good}: valid kubeconfig"
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    assert cli.main(["check", "--kubeconfig", str(bad)]) == 2
    assert f"invalid kubeconfig {bad}" in capsys.readouterr().err
    assert cli.main(["check"]) == 2


def test_check_asks_the_api_server_whether_the_status_lease_can_be_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Lease namespace that does not exist would leave both boxes unable to write status:
    `director check` says so before the director runs (a dry-run create: nothing written)."""
    from lab.kubeapi import FakeApiServer

    with FakeApiServer(namespaces=("default",)) as api:
        kubeconfig = str(api.kubeconfig(tmp_path / "kc"))
        assert cli.main(["check", "--kubeconfig", kubeconfig]) == 2
        out, err = capsys.readouterr()
        assert out.strip() == f"{kubeconfig}: valid kubeconfig"
        assert err.strip() == (
            "director: the API server refuses the status Lease lvs-director/lvs-director: "
            'HTTP 404 NotFound: namespaces "lvs-director" not found'
        )
        api.create("namespaces", {"metadata": {"name": "lvs-director"}}, namespace="")
        assert cli.main(["check", "--kubeconfig", kubeconfig]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            "the API server would let this director hold the status Lease lvs-director/lvs-director"
        )
        assert api.store.list("leases", None)["items"] == [], "a dry run writes nothing"


def test_check_names_every_fault_of_a_file_with_its_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """All the faults of one pass, not the first alone; what only the box can tell (the
    token file) with the line and field of the file that names it, never an empty where."""
    config = tmp_path / "director.yaml"
    config.write_text(
        "services:\n"
        "  - {name: web, address: 198.51.100.10, port: 99999, real_servers: [192.0.2.1:80]}\n"
        "  - {name: x, address: nope, port: 80, real_servers: []}\n"
    )
    assert cli.main(["check", "--config", str(config)]) == cli.EXIT_CONFIG
    assert capsys.readouterr().err.splitlines() == [
        f"director: invalid configuration: {config}:2: services[0].port: must be an integer "
        "between 1 and 65535 (got 99999)",
        f"director: invalid configuration: {config}:3: services[1].address: 'nope' is not an "
        "IPv4 or IPv6 address",
    ]
    assert cli.main(["check", "--json", "--config", str(config)]) == cli.EXIT_CONFIG
    report = json.loads(capsys.readouterr().out)
    assert [(e["line"], e["where"]) for e in report["errors"]] == [
        (2, "services[0].port"),
        (3, "services[1].address"),
    ]
    assert report["error"] == report["errors"][0]
    config = api_config(tmp_path, token=None)  # the token file is missing
    assert cli.main(["check", "--json", "--config", str(config)]) == cli.EXIT_CONFIG
    error = json.loads(capsys.readouterr().out)["error"]
    assert (error["line"], error["where"]) == (3, "api.token_file")
    assert error["reason"].endswith(": No such file or directory")


def test_check_says_when_nothing_will_make_a_vip_local_on_this_box(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A single box without ha: never adds its VRRP pools' addresses (keepalived does), nor
    its static VIPs: IPVS then serves nothing. Said as a note, not refused (the operator may
    hold the addresses on an interface)."""
    config = tmp_path / "director.yaml"
    config.write_text(
        "ownership: {networks: [198.51.100.0/24, 127.0.0.0/8]}\n"
        "pools: [{name: edge, addresses: [198.51.100.64/28]}]\n"
        "services:\n"
        "  - {name: away, address: 198.51.100.10, port: 80, real_servers: [192.0.2.1:80]}\n"
        "  - {name: here, address: 127.0.0.1, port: 80, real_servers: [192.0.2.1:80]}\n"
    )
    assert cli.main(["check", "--json", "--config", str(config)]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(
        n.startswith("pools edge: their addresses are made local by the VRRP pair") for n in notes
    ), notes
    assert any(
        n.startswith("1 static service address(es) (198.51.100.10) are not this box's")
        for n in notes
    ), notes
    with_ha = config.read_text() + (
        "ha: {interface: lo, router_id: a, priority: 100, unicast_source: 192.0.2.250, "
        "peers: [192.0.2.251]}\n"
    )
    config.write_text(with_ha)
    assert cli.main(["check", "--json", "--offline", "--config", str(config)]) == 0
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if "ha:" in n]


def test_check_json_says_what_was_checked_and_where_a_file_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", "--offline", "--json", "--config", EXAMPLE]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and "error" not in report and report["notes"] == []
    assert report["config"] == {"file": EXAMPLE, "valid": True, "services": 8, "real_servers": 24}
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  - address: 198.51.100.1\n    port: 99999\n")
    assert cli.main(["check", "--json", "--config", str(bad)]) == cli.EXIT_CONFIG
    out, err = capsys.readouterr()
    report = json.loads(out)  # the refusal on stdout as JSON too, nothing on stderr
    assert err == "" and report["ok"] is False
    assert report["error"]["file"] == str(bad) and report["error"]["line"] == 3
    assert report["error"]["where"] == "services[0].port"
    assert "between 1 and 65535" in report["error"]["reason"]
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    assert cli.main(["check", "--json", "--kubeconfig", str(kubeconfig)]) == cli.EXIT_CONFIG
    report = json.loads(capsys.readouterr().out)
    assert report["kubeconfig"] == {"file": str(kubeconfig), "valid": False}
    assert "invalid kubeconfig" in report["error"]["message"]


def test_check_of_a_file_loads_no_validation_library() -> None:
    """`director check` (and the start's ExecStartPre) reads the file with the sections'
    own checks: a new process, as an operator runs it, ends without pydantic loaded, and
    says the file is valid."""
    script = (
        "import sys; from director.cli import main as cli; "
        f"code = cli.main(['check', '--offline', '--config', {EXAMPLE!r}]); "
        "print('loaded:', ' '.join(sorted(sys.modules))); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert ": valid (" in done.stdout
    (listed,) = [line for line in done.stdout.splitlines() if line.startswith("loaded: ")]
    packages = {name.split(".")[0] for name in listed.split()[1:]}
    assert "director" in packages, "the module list was read"
    assert packages.isdisjoint({"pydantic", "pydantic_core"}), sorted(packages)
    # A file without ha:, bgp: or pools: loads none of their sections, nor the core that
    # serves Kubernetes Services (a quarter of a check's imports, measured)
    sections = {"director.schema.ha", "director.schema.bgp", "director.schema.pool_entries"}
    core = {"director.core.pools", "director.core.ipam", "director.core.cluster"}
    assert set(listed.split()[1:]).isdisjoint(
        sections | core | {"director.core.annotations", "director.core.policy"}
    )


def test_a_section_imported_later_is_checked_as_any_other(tmp_path: Path) -> None:
    """ha:, bgp: and pools: are imported when a file has them, and refused, or made, as
    if they had always been there: in a new process, a bad value in each is named."""
    config = tmp_path / "director.yaml"
    config.write_text(
        "pools: [{name: p, addresses: [198.51.100.0/28], auto_assign: maybe}]\n"
        "ha: {interface: eth0, router_id: d1, priority: 300, unicast_source: 192.0.2.1, "
        "peers: [192.0.2.2]}\n"
        "bgp: {asn: 65000, router_id: 192.0.2.1, peers: [{address: nope, asn: 65001}]}\n"
    )
    script = (
        "import sys; from director.cli import main as cli; "
        f"sys.exit(cli.main(['check', '--offline', '--json', '--config', {str(config)!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == cli.EXIT_CONFIG, done.stdout + done.stderr
    said = done.stdout
    for where in ("pools[0].auto_assign", "ha.priority", "bgp.peers[0].address"):
        assert where in said, said


def test_check_clusters_asks_each_clusters_api_server_for_its_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several clusters: `director check --clusters` checks every cluster's own identity,
    and names the one whose API server would refuse its Lease."""
    from lab.kubeapi import FakeApiServer

    with FakeApiServer() as good, FakeApiServer(namespaces=("default",)) as bare:
        config = tmp_path / "director.yaml"
        config.write_text(
            "pools: [{name: p, addresses: [198.51.100.0/28]}]\nclusters:\n"
            f"  - {{name: prod, kubeconfig: {good.kubeconfig(tmp_path / 'prod')}, pools: [p]}}\n"
            f"  - {{name: lab, kubeconfig: {bare.kubeconfig(tmp_path / 'lab')}, pools: [p]}}\n"
        )
        argv = ["check", "--config", str(config), "--clusters", "--json"]
        assert cli.main(argv) == cli.EXIT_CONFIG
        report = json.loads(capsys.readouterr().out)
        prod, lab = report["clusters"]["prod"], report["clusters"]["lab"]
        assert prod["kubeconfig"]["lease"]["allowed"] is True and prod["error"] is None
        assert lab["kubeconfig"]["lease"]["allowed"] is False
        assert 'namespaces "lvs-director" not found' in lab["error"]["message"]
        bare.create("namespaces", {"metadata": {"name": "lvs-director"}}, namespace="")
        assert cli.main(argv[:-1]) == 0
        out = capsys.readouterr().out.splitlines()
        allowed = (
            "the API server would let this director hold the status Lease lvs-director/lvs-director"
        )
        lab_at = out.index("cluster lab:")
        assert out.index("cluster prod:") < lab_at and out[lab_at + 2] == allowed
    assert cli.main(["check", "--clusters", "--kubeconfig", "x"]) == cli.EXIT_CONFIG


def test_two_clusters_that_reach_one_api_server_are_refused_by_check_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 71, 4: two clusters: entries whose kubeconfigs reach the same API server passed
    check --clusters, and at run time each Service's status flipped between two addresses
    about three times a second, for ever. Both refuse it, naming the two."""
    from director.daemon import wiring
    from director.schema.config import parse_config
    from lab.kubeapi import FakeApiServer

    with FakeApiServer() as server:
        text = (
            "pools: [{name: p, addresses: [198.51.100.0/28]}, "
            "{name: q, addresses: [198.51.100.16/28]}]\nclusters:\n"
            f"  - {{name: prod, kubeconfig: {server.kubeconfig(tmp_path / 'a')}, pools: [p]}}\n"
            f"  - {{name: copy, kubeconfig: {server.kubeconfig(tmp_path / 'b')}, pools: [q]}}\n"
        )
        config = tmp_path / "director.yaml"
        config.write_text(text)
        assert cli.main(["check", "--config", str(config), "--clusters"]) == cli.EXIT_CONFIG
        said = capsys.readouterr().err
        assert "clusters prod and copy reach the same API server" in said, said
        with pytest.raises(ValueError, match="clusters prod and copy reach the same API"):
            wiring.clusters(parse_config(text, str(config)), None)
