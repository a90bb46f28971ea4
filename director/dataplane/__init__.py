"""The only door to the kernel: the interface (a Protocol), the netlink codec (pure), the
kernel adapter, network namespaces, nftables, and the stateful fake."""
