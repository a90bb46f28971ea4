"""director: an IPVS load-balancer appliance (LVS director) for on-prem Kubernetes."""

import time as _time

__version__ = "0.4.33"
# When the first line of director's own code ran: the end of the interpreter's start
# (director.cli.startup splits a start's time from here).
FIRST_LINE = _time.monotonic()
