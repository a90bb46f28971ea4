"""FRR, for BGP: its configuration as text (``conf``), the daemon applied and read back
(``announce``), the thread that keeps it true (``sync``), and the VIPs on ``lo`` that the
announced routes lead to (``loopback``)."""
