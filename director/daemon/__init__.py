"""``director run``'s composition root: the settings read, the dataplane and the engine made,
the first sync through the ``Ipvs`` port, READY, then the adapters (Kubernetes, the API,
keepalived, FRR, the metrics); the keepers it starts, the threads it watches, and the lock it
holds. The command line (``director.cli``) only parses arguments and runs one-shot commands;
it calls in here for ``director run``."""
