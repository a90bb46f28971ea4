"""Prometheus: the loop's figures and the collectors (``collector``), the kernel's IPVS
counters written at scrape time (``ipvs``), the daemons beside the director (``daemons``),
and the text format itself (``promtext``)."""
