"""Netlink's own wire format, light enough for a start's first moments: the family lookup as
pyroute2 writes and reads it, a datagram split into its messages, the kernel's words for an
error (with the extended ack's message)."""

from __future__ import annotations

import errno

from pyroute2.netlink import ctrlmsg

from director.dataplane.netlink import (
    I32,
    NLM_F_ACK_TLVS,
    NLMSG_ERROR,
    NLMSGERR_ATTR_MSG,
    NLMSGHDR,
    error_text,
    family_id,
    family_request,
    pack_nla,
    split_messages,
)


def test_the_ipvs_family_lookup_reads_as_pyroute2_writes_and_reads_it() -> None:
    """The one request that finds IPVS's family id (no netlink library at run time): the
    question decodes in pyroute2 as CTRL_CMD_GETFAMILY for "IPVS", and the id is read out
    of an answer pyroute2 encoded, as the controller sends it."""
    asked = ctrlmsg(family_request(7))
    asked.decode()
    assert (asked["header"]["type"], asked["header"]["sequence_number"]) == (0x10, 7)
    assert asked["cmd"] == 3 and asked.get_attr("CTRL_ATTR_FAMILY_NAME") == "IPVS"
    answer = ctrlmsg()
    answer["cmd"] = 1  # CTRL_CMD_NEWFAMILY
    answer["version"] = 2
    answer["attrs"] = [
        ("CTRL_ATTR_FAMILY_NAME", "IPVS"),
        ("CTRL_ATTR_FAMILY_ID", 0x23),
        ("CTRL_ATTR_VERSION", 1),
        ("CTRL_ATTR_HDRSIZE", 0),
    ]
    answer.encode()
    data = bytes(answer.data)
    assert family_id(data, 16, len(data)) == 0x23


def test_a_datagram_is_split_into_its_messages_past_their_padding() -> None:
    first = NLMSGHDR.pack(16 + 3, 30, 0, 7, 0) + b"abc" + b"\0"  # padded to four bytes
    second = NLMSGHDR.pack(16 + 4, 31, 2, 8, 0) + b"wxyz"
    assert split_messages(first + second) == [(30, 0, 7, 16, 19), (31, 2, 8, 36, 40)]
    assert split_messages(first[:10]) == []  # a header cut short is no message


def test_an_error_says_the_kernels_reason_and_its_extended_message() -> None:
    echoed = NLMSGHDR.pack(16, 30, 0, 9, 0)  # the request's header (NETLINK_CAP_ACK)
    tlvs = pack_nla(NLMSGERR_ATTR_MSG, b"Scheduler not found\0")
    body = I32.pack(-errno.ENOENT) + echoed + tlvs
    data = NLMSGHDR.pack(16 + len(body), NLMSG_ERROR, NLM_F_ACK_TLVS | 0x100, 9, 0) + body
    ((kind, flags, seq, start, end),) = split_messages(data)
    assert (kind, seq) == (NLMSG_ERROR, 9)
    assert error_text(data, flags, start, end) == "No such file or directory: Scheduler not found"
    plain = NLMSGHDR.pack(16 + 20, NLMSG_ERROR, 0, 9, 0) + I32.pack(-errno.EEXIST) + echoed
    assert error_text(plain, 0, 16, len(plain)) == "File exists"
