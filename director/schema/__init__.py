"""The one definition of each external shape: the configuration file."""

import os

# The director runs no pydantic plugins. Without this, the first validator scans every
# installed package's metadata for one (and would load any it found into the director).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
