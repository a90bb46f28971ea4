"""``director bundle``: a support bundle holds what a bug report needs, and no secret."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serverlab import config
from tests.weblab import TOKEN


def test_a_support_bundle_holds_what_a_bug_report_needs_and_no_secret(  # type: ignore[no-untyped-def]
    running, tmp_path: Path
) -> None:
    """director bundle against the running director: status and plan from its API, the
    configuration with the BGP passwords redacted (block and flow style; the token file's
    path kept, never the token), and each part it could not get named with the reason."""
    import tarfile

    _runtime, _ipvs, url, api = running
    frr = tmp_path / "frr.conf"  # as the director renders it: the passwords in it too
    frr.write_text("router bgp 64512\n neighbor 198.18.0.1 password s3cret-one\n")
    text = config(tmp_path, api) + (
        f"bgp:\n  asn: 64512\n  router_id: 198.18.0.11\n  config_file: {frr}\n  peers:\n"
        "    - {address: 198.18.0.1, asn: 64500, password: s3cret-one}\n"
        "    - address: 198.18.0.2\n      asn: 64500\n      password: s3cret-two\n"
    )
    path = tmp_path / "director.yaml"
    path.write_text(text)
    out = tmp_path / "bundle.tar.gz"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "director",
            "bundle",
            "--config",
            str(path),
            "--out",
            str(out),
            "--url",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        files = {
            m.name.removeprefix("director-bundle/"): tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    manifest = files["MANIFEST"]
    assert "ok      api/status.json" in manifest and "ok      api/plan.json" in manifest
    assert json.loads(files["api/status.json"])["ready"] is True
    assert "ok      the configuration is valid" in manifest
    redacted = files["config/director.yaml"]
    assert "s3cret" not in redacted and redacted.count("password: <redacted>") == 2
    assert str(tmp_path / "token") in redacted and TOKEN not in "".join(files.values())
    assert "neighbor 198.18.0.1 password <redacted>" in files["frr/frr.conf"]
    assert not any("s3cret" in content for content in files.values())
    assert len(redacted.splitlines()) == len(text.splitlines()), "line numbers still match"
    for name in ("kernel/ipvsadm-Ln.txt", "journal/director.log"):  # present or explained
        assert name in files or f"missing {name}: " in manifest, manifest
    assert oct(out.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "spelling",
    [
        "password: s3cret-x\n",
        "password: |\n        s3cret-x\n",
        "password:\n        s3cret-x\n",
        '"password": "s3cret-x"\n',
        "? password\n      : s3cret-x\n",
        "'pass''word': s3cret-x\n".replace("''", ""),
    ],
)
def test_a_bundle_redacts_a_secret_however_yaml_spells_it(spelling: str) -> None:
    """The secrets are found by reading the file as YAML: a block scalar, the value on the
    next line, a quoted key, a complex key: none of them leaks (per-line patterns did)."""
    from director.cli.bundle import REDACTED, redact

    text = (
        "bgp:\n  asn: 64512\n  peers:\n    - address: 198.18.0.2\n      asn: 64500\n"
        f"      {spelling}"
    )
    out = redact(text)
    assert out is not None and "s3cret" not in out and REDACTED in out
    assert len(out.splitlines()) == len(text.splitlines())
    assert redact("bgp: [unclosed\n") is None  # not YAML: left out, not guessed at


@pytest.mark.parametrize("value", ["0x1A2B", "12:30:45", "017", "1.", "1e3", ".inf"])
def test_a_bundle_redacts_a_secret_yaml_would_read_as_a_number(value: str) -> None:
    """Issue 71, 4: BGP passwords YAML 1.1 reads as numbers were left in clear text (the
    value read, 6699, is not the text written, 0x1A2B). Redacted by key, as written."""
    from director.cli.bundle import REDACTED, redact

    text = (
        "bgp:\n  asn: 64512\n  peers:\n    - address: 198.18.0.2\n      asn: 64500\n"
        f"      password: {value}\n"
    )
    out = redact(text)
    assert out is not None and value not in out and f"password: {REDACTED}" in out, out


def test_a_bundle_written_over_an_existing_file_is_its_owners_alone(tmp_path: Path) -> None:
    from director.cli.bundle import write

    out = tmp_path / "bundle.tar.gz"
    out.write_text("old")
    out.chmod(0o644)
    write(out, {"x": "y"}, ["m"])
    assert oct(out.stat().st_mode & 0o777) == "0o600"
