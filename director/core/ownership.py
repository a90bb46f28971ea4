"""What the director owns. Pure.

The director only ever touches virtual services inside the address ranges (and firewall-mark
ranges) it is configured to own; everything else the kernel holds is foreign. The planner,
the configuration's schema and the decommissioning all ask this one question here.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from director.core.model import ServiceKey

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Ownership:
    """The networks and firewall marks whose virtual services the director owns."""

    networks: tuple[Network, ...] = ()
    fwmarks: tuple[range, ...] = ()
    # (family, network as int, mask as int): owns() runs once per service on every full sync.
    _masks: tuple[tuple[int, int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        masks = tuple(
            (
                socket.AF_INET6 if net.version == 6 else socket.AF_INET,
                int(net.network_address),
                int(net.netmask),
            )
            for net in self.networks
        )
        object.__setattr__(self, "_masks", masks)

    def owns(self, key: ServiceKey) -> bool:
        if key.fwmark:
            return any(key.fwmark in marks for marks in self.fwmarks)
        family = key.family
        value = int.from_bytes(socket.inet_pton(family, key.address), "big")
        return any(fam == family and value & mask == net for fam, net, mask in self._masks)

    def describe(self) -> str:
        parts = [str(n) for n in self.networks]
        parts += [f"fwmark {r.start}-{r.stop - 1}" for r in self.fwmarks]
        return ", ".join(parts) or "nothing"
