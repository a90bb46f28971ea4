"""The ``ha:`` section: every key read as written, and each bad value refused at start with
where it is and why."""

from __future__ import annotations

import pytest

from director.schema.config import ConfigError, parse_config
from director.schema.ha import HaSettings


@pytest.mark.parametrize(
    ("body", "where", "reason"),
    [
        ("interface: 'eth0; rm'", "ha.interface", "is not an interface name"),
        ("peers: [2001:db8::2]", "ha.peers[0]", "address family"),
        # issue 71, 2: the other box's file copied without swapping (split brain)
        ("peers: [203.0.113.11]", "ha.peers[0]", "this box's own unicast_source"),
        ("advert_int: 0.001", "ha.advert_int", "between 0.01 and 40.95"),
        ("priority: 255", "ha.priority", "between 1 and 254"),
        ("fifo: 'run/x y'", "ha.fifo", "absolute path"),
        ("sync_group: 192.0.2.9", "ha.sync_group", "multicast group"),
        ("sync_port: 0", "ha.sync_port", "between 1 and 65535"),
        ("alive_seconds: -1", "ha.alive_seconds", "between 0 and 3600"),
    ],
)
def test_ha_settings_are_validated_at_start(body: str, where: str, reason: str) -> None:
    fields = {
        "interface": "eth0",
        "router_id": "d1",
        "priority": "100",
        "unicast_source": "203.0.113.11",
        "peers": "[203.0.113.12]",
    }
    key = body.split(":", maxsplit=1)[0]
    fields[key] = body.split(":", 1)[1].strip()
    text = "ha:\n" + "".join(f"  {k}: {v}\n" for k, v in fields.items())
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "ha.yaml")
    assert caught.value.where == where and reason in caught.value.reason


def test_every_ha_key_is_read() -> None:
    text = """
ha:
  interface: front
  router_id: d1
  priority: 150
  unicast_source: 203.0.113.11
  peers: [203.0.113.12]
  virtual_router_id: 7
  advert_int: 0.25
  nopreempt: true
  track_interfaces: [back]
  sync_interface: back
  sync_id: 3
  gateways: [{address: 192.0.2.1/24, interface: back}]
  inline_vips: 5
  config_file: /etc/k.conf
  pid_file: /run/k.pid
  fifo: /run/k.fifo
  keepalived: /usr/sbin/keepalived
  netns: lab-d1
  realtime_priority: 10
"""
    ha_settings = parse_config(text, "ha.yaml").ha
    assert ha_settings == HaSettings(
        interface="front",
        router_id="d1",
        priority=150,
        unicast_source="203.0.113.11",
        peers=("203.0.113.12",),
        virtual_router_id=7,
        advert_int=0.25,
        preempt_delay=30,
        nopreempt=True,
        track_interfaces=("back",),
        sync_interface="back",
        sync_id=3,
        gateways=(("192.0.2.1", 24, "back"),),
        inline_vips=5,
        config_file="/etc/k.conf",
        pid_file="/run/k.pid",
        fifo="/run/k.fifo",
        keepalived="/usr/sbin/keepalived",
        netns="lab-d1",
        realtime_priority=10,
    )
