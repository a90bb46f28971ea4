"""FRR's configuration as the director renders it, checked by FRR's own vtysh: what is
served is announced, a file FRR rejects never goes live, the scale-out example renders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from director.adapters.frr.announce import Frr, FrrRejected
from director.adapters.frr.conf import render_frr
from director.schema.config import parse_config
from tests.bgplab import BASE, ROUTES, config


def test_frr_configuration_announces_what_is_served_and_frr_accepts_it(tmp_path: Path) -> None:
    settings = config()
    assert settings.bgp is not None
    text = render_frr(settings.bgp, ROUTES, settings.pools, "d.yaml")
    assert "network 198.51.100.10/32 route-map director-edge" in text
    assert "198.51.100.11" not in text  # withdrawn
    assert "address-family ipv6 unicast\n  network 2001:db8:100::5/128" in text
    assert (
        " set community 64512:10\n set large-community 64512:1:4294967295\n"
        " set local-preference 200"
    ) in text
    assert " neighbor 198.18.0.1 bfd profile director-300ms-x3" in text
    assert " neighbor 2001:db8::1 password s3cret" in text
    assert " neighbor 2001:db8::1 ebgp-multihop 2" in text
    assert "neighbor 2001:db8::1 bfd" not in text
    assert "route-map director-pair" not in text  # a vrrp pool has no route map
    Frr(settings.bgp).validate(text)  # vtysh --dryrun: FRR's own parser


def test_a_configuration_frr_rejects_never_goes_live(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = parse_config(BASE.replace("bgp:\n", f"bgp:\n  config_file: {tmp_path}/frr.conf\n"))
    assert settings.bgp is not None
    frr = Frr(settings.bgp)
    frr.path.write_text("! the live one\n")
    with pytest.raises(FrrRejected, match="Unknown command"):
        frr.install("router bgp 64512\n neighbor 198.18.0.1 remote-az 1\n")
    assert frr.path.read_text() == "! the live one\n"
    assert frr.rejected == 1 and "event=frr.config_rejected" in caplog.text
    frr.applied = "! the live one\n"  # as after the first install since the director started
    assert frr.install("! the live one\n") is False  # unchanged: FRR is not touched


def test_vtysh_is_installed() -> None:
    """make test installs FRR: the checks above ran FRR's parser, not a stand-in."""
    assert shutil.which("vtysh") is not None


def test_the_scale_out_example_is_valid_and_renders_a_configuration_frr_accepts(
    tmp_path: Path,
) -> None:
    from director.core.announce import decide

    settings = parse_config(
        (Path(__file__).resolve().parents[3] / "examples" / "bgp.yaml").read_text()
    )
    assert settings.bgp is not None and [p.name for p in settings.bgp_pools] == ["edge"]
    web = next(iter(settings.services.values()))
    route = decide(web.key.address, settings.bgp_pools[0], [web.key], settings.services, ready=True)
    text = render_frr(settings.bgp, {route.vip: route}, settings.pools)
    assert "network 198.51.100.10/32 route-map director-edge" in text
    Frr(settings.bgp).validate(text)
