"""Helpers shared by the Ansible tests (tests/test_ansible.py and
tests/system/test_ansible_role.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent  # ansible, ansible-playbook and ansible-lint live here


def ansible_env() -> dict[str, str]:
    return dict(
        os.environ,
        PATH=f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PYTHONDONTWRITEBYTECODE="1",
    )


def ansible(tool: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run an Ansible command line tool from ansible/ (where ansible.cfg is)."""
    return subprocess.run(
        [str(BIN / tool), *args],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env=ansible_env(),
        timeout=timeout,
        check=False,
    )
