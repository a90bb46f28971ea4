"""Announcing the VIPs: the set of addresses the director serves, handed to whatever makes
them reachable (keepalived's VRRP today) whenever it changes, and only then.

Where the address set comes from and who announces it are kept apart, so another way of
announcing (BGP) is one more announcer beside this one, not a change to the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from director.core.model import ServiceKey

Announce = Callable[[frozenset[str]], None]


class VipAnnouncer:
    def __init__(self) -> None:
        self.announce: Announce | None = None
        self._announced: frozenset[str] | None = None
        self._keys_changed = True

    def keys_changed(self) -> None:
        """The set of virtual services changed: the VIPs may have."""
        self._keys_changed = True

    def update(self, keys: Iterable[ServiceKey]) -> None:
        """Announce the addresses of ``keys`` if the set changed since the last time."""
        if not self._keys_changed or self.announce is None:
            return
        self._keys_changed = False
        vips = frozenset(key.address for key in keys if not key.fwmark)
        if vips != self._announced:
            self._announced = vips
            self.announce(vips)
