"""The admin API's client: where the director is and with what token (the options, then the
configuration's api: section, then the environment), and the exit status each failure
means to a script."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from director.cli.client import (
    DEFAULT_URL,
    EXIT_REFUSED,
    EXIT_UNAUTHORISED,
    EXIT_UNREACHABLE,
    CtlError,
    call,
    resolve,
    token,
)


def options(**given: str | None) -> argparse.Namespace:
    values: dict[str, str | None] = {"config": None, "url": None, "token_file": None}
    values |= {"ca_file": None, **given}
    return argparse.Namespace(**values)


def test_the_options_win_then_the_config_file_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "d.yaml"
    config.write_text("api: {listen: '0.0.0.0:9443', token_file: /etc/d/token}\n")
    monkeypatch.setenv("DIRECTOR_URL", "http://192.0.2.1:1")
    from_file = options(config=str(config))
    resolve(from_file)
    assert (from_file.url, from_file.token_file) == ("http://127.0.0.1:9443", "/etc/d/token")
    given = options(config=str(config), url="http://[::1]:1", token_file="/t")
    resolve(given)
    assert (given.url, given.token_file) == ("http://[::1]:1", "/t")
    from_env = options()
    resolve(from_env)
    assert from_env.url == "http://192.0.2.1:1"
    monkeypatch.delenv("DIRECTOR_URL")
    default = options()
    resolve(default)
    assert default.url == DEFAULT_URL


def test_a_config_file_without_an_api_says_so(tmp_path: Path) -> None:
    config = tmp_path / "d.yaml"
    config.write_text("ownership: {networks: [10.0.0.0/8]}\n")
    with pytest.raises(CtlError, match="no api: section") as caught:
        resolve(options(config=str(config)))
    assert caught.value.code == EXIT_REFUSED


def test_a_token_missing_or_unreadable_is_exit_6(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DIRECTOR_TOKEN", raising=False)
    monkeypatch.delenv("DIRECTOR_TOKEN_FILE", raising=False)
    with pytest.raises(CtlError, match="no token") as caught:
        token(options())
    assert caught.value.code == EXIT_UNAUTHORISED
    with pytest.raises(CtlError, match="cannot read the token file") as caught:
        token(options(token_file=str(tmp_path / "absent")))
    assert caught.value.code == EXIT_UNAUTHORISED
    (tmp_path / "t").write_text("s3cret\n")
    assert token(options(token_file=str(tmp_path / "t"))) == "s3cret"
    monkeypatch.setenv("DIRECTOR_TOKEN", " from-env ")
    assert token(options()) == "from-env"


def test_a_director_that_does_not_answer_is_exit_5(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIRECTOR_TOKEN", "t")
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CtlError, match="cannot reach the director") as caught:
        call(options(url=f"http://127.0.0.1:{port}"), "GET", "/api/v1/status")
    assert caught.value.code == EXIT_UNREACHABLE
