"""The kernel lab: a throwaway VM with IPVS, and network-namespace test hosts inside it."""
