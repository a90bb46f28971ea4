# The two commands an operator needs first: `make demo` and `make test`.
# Each does all its own set-up on a fresh Debian 12 machine (as root: apt and pip).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# qemu + Debian's kernel (it has ip_vs and every scheduler as modules), a static busybox
# (virtme-ng's guest init), and binutils' strings and file (virtme-ng reads the kernel's
# version with them) for the lab VM; ipvsadm to cross-check the kernel; keepalived for
# the HA pair, conntrackd to carry its full-NAT connections across a failover; frr (zebra, bfdd, bgpd, vtysh, frr-reload.py) to announce VIPs over BGP and
# to be the lab's router; nftables for source filtering; promtool (prometheus) to check the metrics
# and the alert rules; chromium to render the status page; openssl for the TLS test; zsh to test
# shell completion; debootstrap for the Debian root the Ansible role is applied to; ruby to check
# the Vagrantfile; wrk, iperf3 and nginx-light for the data path's load and real servers (only
# ever run inside the lab VM's namespaces: the package's own nginx service is stopped and
# disabled on this machine).
APT_PACKAGES := python3 python3-venv qemu-system-x86 linux-image-amd64 busybox-static binutils file \
	ipvsadm keepalived conntrackd frr nftables iproute2 kmod procps prometheus chromium openssl zsh debootstrap ruby \
	wrk iperf3 nginx-light

.PHONY: setup system venv lint unit role-test kernel-test test demo bench bench-dataplane bench-flood chaos wheelhouse lock fresh boot-test docs clean

setup: system venv

system:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' \
	    || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi; \
	if [ -d /run/systemd/system ]; then \
	  if systemctl is-enabled -q nginx 2>/dev/null; then systemctl disable --now -q nginx; fi; \
	elif [ -f /run/nginx.pid ]; then service nginx stop >/dev/null 2>&1 || true; fi

venv: $(VENV)/.installed

# The test tools are pinned as the runtime is (requirements-dev.lock, hashes checked); the
# director itself is installed editable on top, without resolving anything again.
$(VENV)/.installed: pyproject.toml requirements-dev.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip uninstall -q -y director 2>/dev/null || true  # the distribution's name before 0.2.0
	$(PY) -m pip install -q --require-hashes -r requirements-dev.lock
	$(PY) -m pip install -q --no-deps -e .
	touch $@

lint: venv
	$(PY) -m ruff check director lab tests
	$(PY) -m ruff format --check director lab tests
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) -m lab.shape

unit: venv
	$(PY) -m pytest -m "not kernel and not role and not boot" tests

# The Ansible role applied twice to a debootstrap'd Debian root (cached in .lab/debian-base;
# needs the package registries); the kernel suite then checks what it wrote on a real kernel.
role-test: setup
	$(PY) -m pytest -m role tests

kernel-test: setup
	$(PY) -m lab.vm test

# The role's image booted in qemu with systemd as PID 1: units, watchdog, traffic, reboot;
# then two boxes as a keepalived pair with conntrackd, through kill -9 and a reboot.
boot-test: setup
	$(PY) -m pytest -m boot -s tests/system/test_boot.py tests/system/test_boot_pair.py

# Host unit tests, the Ansible role on a Debian root, the kernel suite in the lab VM (one
# boot, one pytest process), then the role's image booted with systemd.
test: setup lint unit role-test kernel-test boot-test

demo: setup
	$(PY) -m lab.vm run lab.demo

# Faults injected on purpose into a keepalived pair and a BGP trio carrying traffic (the lab
# VM): the time until everything the director owns is back in sync, and what clients saw.
chaos: setup
	$(PY) -m lab.vm run lab.chaos --memory 4G
	cp .lab/lab.chaos/results.json bench/chaos.json

bench: setup
	$(PY) -m lab.bench_config --services 1000 5000 --out bench/config-host.json
	$(PY) -m lab.bench_kube --services 1000 10000 --out bench/kube-host.json
	$(PY) -m lab.bench_health --targets 2000 --seconds 20 --out bench/health-host.json
	$(PY) -m lab.bench_bfd --out bench/bfd-host.json
	$(PY) -m lab.bench_hostile --out bench/hostile-host.json
	$(PY) -m lab.vm run lab.bench --memory 4G
	cp .lab/lab.bench/results.json bench/results.json
	$(PY) -m lab.vm run lab.bench_ha
	cp .lab/lab.bench_ha/results.json bench/ha.json
	$(PY) -m lab.vm run lab.bench_bgp --memory 4G
	cp .lab/lab.bench_bgp/results.json bench/bgp.json
	$(PY) -m lab.vm run lab.bench_reload --memory 4G
	cp .lab/lab.bench_reload/results.json bench/reload.json
	$(PY) -m lab.vm run lab.bench_start --memory 4G
	cp .lab/lab.bench_start/results.json bench/start.json
	$(PY) -m lab.vm run lab.bench_static --memory 4G
	cp .lab/lab.bench_static/results.json bench/static-memory.json
	$(PY) -m lab.vm run lab.bench_kube --memory 6G -- --adapter kernel
	cp .lab/lab.bench_kube/results.json bench/kube-vm.json
	$(MAKE) bench-dataplane
	$(MAKE) bench-flood

# The data path in the lab VM (wrk, iperf3, nginx): bare IPVS against the director in each
# mode, then a pair's failover under load; bounded in time, only between the lab's namespaces.
bench-dataplane: setup
	$(PY) -m lab.vm run lab.bench_dataplane --memory 4G -- --rounds 5 --seconds 5 --failover-seconds 30
	cp .lab/lab.bench_dataplane/results.json bench/dataplane.json
	cp .lab/lab.bench_dataplane/failover.json bench/failover-load.json

# A SYN flood of the lab's own (spoofed from 198.18.0.0/15, bounded) against a box, with the
# SYN guard and without it: what clients, the API and the backends see (bench/flood.json).
bench-flood: setup
	$(PY) -m lab.vm run lab.bench_flood --memory 4G -- --seconds 20
	cp .lab/lab.bench_flood/results.json bench/flood.json

# The README's two commands in a clean Debian 12 root (debootstrap, cached in .lab/fresh-base):
# proves that they install everything they need. Run it after any change to the set-up.
# The configuration reference and the JSON Schema, made from the schema (director/schema/):
# run after changing a field; tests/test_docs.py and tests/schema/test_schema.py fail until then.
docs: venv
	$(PY) -m lab.configdoc
	$(VENV)/bin/director schema > docs/config.schema.json

fresh: setup
	$(PY) -m lab.fresh

# The director and its dependencies as wheels for an edge box's Python (the Ansible role's
# director_wheelhouse): make wheelhouse [BOX_PYTHON=3.11] [BOX_CPU=x86_64]
BOX_PYTHON ?= 3.11
BOX_CPU ?= x86_64
wheelhouse: venv
	$(PY) ansible/roles/director/files/build-wheelhouse.py --source . \
	  --python-version $(BOX_PYTHON) --platform $(BOX_CPU) --out dist/wheelhouse

# The pinned runtime dependencies (with hashes) the wheelhouse is built from, and the pinned test
# tools make venv installs (requirements-dev.lock): run after
# changing the dependencies in pyproject.toml.
lock: venv
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip compile pyproject.toml --universal --generate-hashes --python-version 3.11 \
	  --no-header --quiet -o requirements.lock.new
	( sed -n '1,4p' requirements.lock; cat requirements.lock.new ) > requirements.lock.tmp
	rm requirements.lock.new && mv requirements.lock.tmp requirements.lock
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --universal --generate-hashes \
	  --python-version 3.11 --no-header --quiet -c requirements.lock -o requirements-dev.lock.new
	( sed -n '1,4p' requirements-dev.lock; cat requirements-dev.lock.new ) > requirements-dev.lock.tmp
	rm requirements-dev.lock.new && mv requirements-dev.lock.tmp requirements-dev.lock

clean:
	rm -rf .lab $(VENV) *.egg-info
