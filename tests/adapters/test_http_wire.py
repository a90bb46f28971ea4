"""HTTP/1.1 as the admin API's server reads it: each malformed or oversized request refused
with the status a client can act on, bodies whole whether sent by length or in chunks, and
the WSGI environ the application sees."""

from __future__ import annotations

import socket
from typing import cast

import pytest

from director.adapters.http_wire import (
    Conn,
    Refuse,
    Request,
    answer,
    environ,
    parse_head,
    take_body,
)

BODY = 1024


def refused(head: bytes) -> tuple[int, str]:
    with pytest.raises(Refuse) as caught:
        parse_head(head, BODY)
    return caught.value.status, caught.value.detail


def test_a_request_head_is_read_with_its_headers_and_framing() -> None:
    req = parse_head(
        b"POST /api/v1/drains?x=1 HTTP/1.1\r\nHost: d\r\nContent-Length: 5\r\nX-A: 1\r\nx-a: 2",
        BODY,
    )
    assert (req.method, req.target, req.version) == ("POST", "/api/v1/drains?x=1", "HTTP/1.1")
    assert req.headers == {"host": "d", "content-length": "5", "x-a": "1, 2"}
    assert (req.length, req.chunked) == (5, False)


@pytest.mark.parametrize(
    ("head", "status", "reason"),
    [
        (b"GET /", 400, "a malformed request line"),
        (b"GET / HTTP/2.0", 505, "HTTP/1.0 and HTTP/1.1 only"),
        (b"GET / HTTP/1.1\r\n Host: d", 400, "a malformed header line"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b", 400, "host given twice"),
        (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6", 400, "given twice"),
        (b"POST / HTTP/1.1\r\nContent-Length: -1", 400, "content-length is not a number"),
        (b"POST / HTTP/1.1\r\nContent-Length: 2048", 413, "larger than 1024 bytes"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip", 501, "is not supported"),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3",
            400,
            "both content-length and transfer-encoding",
        ),
    ],
)
def test_a_bad_request_is_refused_with_the_status_a_client_can_act_on(
    head: bytes, status: int, reason: str
) -> None:
    got = refused(head)
    assert got[0] == status and reason in got[1], got


def test_a_chunked_body_is_taken_whole_only_once_its_last_chunk_is_here() -> None:
    req = parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", BODY)
    buffer = bytearray(b"3\r\nabc\r\n2;ext=1\r\nde\r\n")
    assert not take_body(req, buffer, BODY, 8192)
    assert bytes(req.body) == b"abcde" and buffer == b""
    buffer += b"0\r\nTrailer: x\r\n\r\nGET / HTTP/1.1"
    assert take_body(req, buffer, BODY, 8192)
    assert buffer == b"GET / HTTP/1.1", "the next request stays for the next read"
    too_big = parse_head(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", BODY)
    with pytest.raises(Refuse, match="larger than 1024 bytes"):
        take_body(too_big, bytearray(b"800\r\n"), BODY, 8192)


def test_the_environ_is_the_request_s_and_the_body_is_handed_over_once() -> None:
    req = Request("GET", "/api/v1/services/a%2Fb?wide=1", "HTTP/1.1")
    req.headers = {"authorization": "Bearer t", "content-type": "application/json"}
    req.body = bytearray(b"{}")
    conn = Conn(cast(socket.socket, None), 7, "192.0.2.9", 40000, True, 0.0, req=req)
    env = environ(conn, "::1", 9180)
    assert env["PATH_INFO"] == "/api/v1/services/a/b" and env["QUERY_STRING"] == "wide=1"
    assert env["HTTP_AUTHORIZATION"] == "Bearer t" and env["CONTENT_TYPE"] == "application/json"
    assert (env["wsgi.url_scheme"], env["REMOTE_ADDR"], env["SERVER_PORT"]) == (
        "https",
        "192.0.2.9",
        "9180",
    )
    assert env["wsgi.input"].read() == b"{}" and req.body == b""


def test_the_server_s_own_answer_is_problem_json_and_says_how_to_authenticate() -> None:
    text = answer(401, "no token", close=True).decode()
    head, body = text.split("\r\n\r\n", 1)
    assert head.startswith("HTTP/1.1 401 Unauthorized\r\n")
    assert 'WWW-Authenticate: Bearer realm="director"' in head and "Connection: close" in head
    assert f"Content-Length: {len(body)}" in head
    assert '"detail": "no token"' in body
