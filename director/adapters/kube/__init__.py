"""Kubernetes: the client (``client``), list + watch of one resource (``watch``), the lists
decoded in processes of their own (``intake``, over ``wire``), the director's writes
(``write``) and the Lease that picks the writer of a pair (``lease``). The only package that
imports the ``kubernetes`` client."""
