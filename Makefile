# Everything installs itself: apt packages the tests and the demo need, then a virtual environment
# with the project (editable) and the launchers for the root-run programs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_STAMP := $(VENV)/.apt-installed

# build: gcc, python3-dev (the cffi module), libc6-dev (its headers and the static launcher's libc.a). Tests and demo: the real runtimes and
# engines, busybox-static for test images, the tools the packaging and e2e tests call; etcd-server and openssl
# for the Kubernetes control plane of the e2e tests (docs/kubernetes-testing.md); lxc for LXC's own nvidia hook
# (`bench lxc` and its e2e test); strace for the test that counts the ld cache's fsyncs.
APT_PACKAGES := gcc make libc6-dev python3-venv python3-dev \
	runc crun podman docker.io containerd busybox-static iproute2 procps kmod util-linux \
	rpm mmdebstrap systemd lintian etcd-server openssl lxc strace

.PHONY: all venv kube demo test test-unit test-e2e reliability reliability-report bench clean apt packages

all: venv

$(APT_STAMP):
	@mkdir -p $(VENV)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@touch $@

apt: $(APT_STAMP)

# The venv is built on the system's /usr/bin/python3 (Debian's, installed above) when there is one, as the
# packages are: the tests and benchmarks run the interpreter users get. It also starts faster than a python
# built with --enable-shared (no libpython to relocate): ~3 ms of every Python process on a container's
# start path. `make PYTHON=...` still picks one. Evaluated when the recipe runs, i.e. after the apt step.
VENV_PYTHON = $(if $(filter command line,$(origin PYTHON)),$(PYTHON),$(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo $(PYTHON)))

$(STAMP): $(APT_STAMP) pyproject.toml setup.py libcontainer_c/build_ffi.py $(wildcard libcontainer_c/src/*) \
		$(wildcard launcher/*.py launcher/*.c launcher/*.h cdi_hook/* c_common/* nvml_inventory/*)
	@[ -x $(BIN)/python ] || $(VENV_PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $@

# The launchers are rebuilt every time (a fraction of a second): a new program module or a moved
# checkout must never leave a stale launcher behind.
venv: $(STAMP)
	@$(BIN)/python -m launcher.install_launchers $(BIN) >/dev/null

demo: venv
	$(BIN)/python scripts/demo.py

# The Kubernetes e2e tests' binaries, once per machine, into ~/.cache/gpu-container-toolkit/kube (XDG_CACHE_HOME):
# containerd 1.7 from Debian's next release, kubelet, kube-apiserver, kube-scheduler, kube-controller-manager
# built from the Go module proxy (10 min or more the first time; nothing later), and NVIDIA's own
# nvidia-device-plugin for the parity test (2-3 min the first time). KUBE_BIN_DIR=DIR uses yours.
kube: venv
	@$(BIN)/python -m tests.support.kube.setup

test: venv kube
	$(BIN)/python -m pytest -ra

test-unit: venv
	$(BIN)/python -m pytest -ra -m 'not e2e'

test-e2e: venv kube
	$(BIN)/python -m pytest -ra -m e2e

# The reliability suite (tests/reliability, docs/RELIABILITY.md) with the full counts; `make test` runs it
# with the short profile. reliability-report runs the full profile and rewrites docs/RELIABILITY.md.
reliability: venv
	GCT_RELIABILITY=full $(BIN)/python -m pytest -ra tests/reliability

reliability-report: venv
	$(BIN)/python -m tests.reliability.report --profile full --output docs/RELIABILITY.md

bench: venv
	$(BIN)/python -m bench

# The wheel, .deb and .rpm in dist/ (docs/packaging.md). Built on Debian's python3, never the one on PATH.
packages: $(APT_STAMP)
	/usr/bin/python3 packaging/build_packages.py --out dist

clean:
	rm -rf $(VENV) build dist *.egg-info libcontainer_c/_native*.so libcontainer_c/_native.c
