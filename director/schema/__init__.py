"""The one definition of each external shape: the configuration file."""
