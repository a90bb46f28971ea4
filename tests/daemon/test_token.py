"""The admin token file as ``director run`` and ``director check`` read it: one line a bearer
header can carry, trimmed of its newline, refused with why otherwise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from director.daemon.token import read_token


def test_a_token_is_one_line_trimmed(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("t0ken-for-the-admin-api\n")
    assert read_token(str(path)) == "t0ken-for-the-admin-api"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("short\n", "at least 16 characters"),
        ("first-line-of-a-token\nsecond-line\n", "one line"),
        ("a token with spaces in it\n", "letters, digits and -._~+/="),
    ],
)
def test_a_token_a_bearer_header_cannot_carry_is_refused(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "token"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(why)):
        read_token(str(path))
    with pytest.raises(ValueError, match="No such file"):
        read_token(str(tmp_path / "missing"))
