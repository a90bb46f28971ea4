"""director: an IPVS load-balancer appliance (LVS director) for on-prem Kubernetes."""

__version__ = "0.4.37"
