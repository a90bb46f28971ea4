"""The pure core: value types, ownership, plan, translate, checks, IPAM, the cluster's values,
the snapshot, intents and the firewall ruleset. Standard library only; no I/O."""
