"""The control loop and its parts: it observes, computes the desired table, and applies the
difference through the dataplane interface."""
