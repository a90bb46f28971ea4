"""The admin API's token file, read where ``director run`` and ``director check`` both need
it: one line a bearer header can carry. Light (``director check`` loads nothing else of the
daemon for it)."""

from __future__ import annotations

import string

TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "-._~+/=")


def read_token(path: str) -> str:
    """The admin token: one line of 16 or more characters that a bearer header can carry
    (RFC 6750's token68: letters, digits and -._~+/=). Raises ValueError saying why not."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"api.token_file {path}: the file is not text") from None
    except OSError as exc:
        raise ValueError(f"api.token_file {path}: {exc.strerror or exc}") from None
    token = text.strip()
    if "\n" in token or "\r" in token:
        raise ValueError(f"api.token_file {path}: the token must be one line (found several)")
    if not set(token) <= TOKEN_CHARS:
        raise ValueError(
            f"api.token_file {path}: the token may hold only letters, digits and -._~+/= "
            "(what an Authorization: Bearer header carries)"
        )
    if len(token) < 16:
        raise ValueError(f"api.token_file {path}: the token must be at least 16 characters")
    return token
