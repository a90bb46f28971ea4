"""The daemons of a keepalived pair: keepalived's file and VRRP state (``keepalived``, read
through ``vrrp``'s notify FIFO), its processes at real-time priority (``processes``), and
conntrackd, which carries full NAT's connections across a failover (``conntrackd``)."""
