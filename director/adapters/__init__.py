"""Adapters at the edges: Kubernetes, keepalived, the health prober, metrics, systemd."""
