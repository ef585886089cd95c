# koordpy — set-up, demo, tests, lint and benchmarks.
#   make demo   creates .venv, installs koordpy, runs `koordpy up --demo`
#   make test   installs what the tests need (mosquitto and prometheus included, and the Kubernetes
#               binaries of `make kube-bin`), then lint + pytest
#   make kube-bin  builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
#               fetches kubectl and helm into $(KUBE_CACHE)/<versions> (tests/kube runs them)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Where `make demo` links the `koordpy` command so another shell finds it.
BIN_DIR ?= $(shell if [ "$$(id -u)" = 0 ]; then echo /usr/local/bin; else echo $$HOME/.local/bin; fi)
PYTEST_ARGS ?=
# Root of the Kubernetes binaries' cache (outside the repository; hack/kube/build.sh names the
# versioned directory under it: `hack/kube/build.sh --print-dir`).
KUBE_CACHE ?= $(HOME)/.cache/koordpy/kube

.PHONY: demo install install-test system-deps lint test pytest bench proto kube-bin clean

demo: install
	@mkdir -p "$(BIN_DIR)" && ln -sf "$(abspath $(VENV))/bin/koordpy" "$(BIN_DIR)/koordpy" \
	  && echo "linked $(BIN_DIR)/koordpy -> $(abspath $(VENV))/bin/koordpy" \
	  || echo "could not link into $(BIN_DIR); use $(VENV)/bin/koordpy"
	$(VENV)/bin/koordpy up --demo

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(VENV)/.installed

$(VENV)/.installed: $(VENV)/bin/python pyproject.toml hatch_build.py controller/api/objects.proto
	$(PIP) install --quiet -e .
	@touch $@

install-test: $(VENV)/.installed-test

$(VENV)/.installed-test: $(VENV)/bin/python pyproject.toml hatch_build.py controller/api/objects.proto
	$(PIP) install --quiet -e '.[test,lint]'
	@touch $@ $(VENV)/.installed

# Debian packages the tests and benchmarks run for real (a broker, a Prometheus server, the
# node exporter the agent's overhead is compared with, openssl for test certificates).
system-deps:
	@missing=""; \
	command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing="$$missing mosquitto"; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v prometheus-node-exporter >/dev/null 2>&1 || missing="$$missing prometheus-node-exporter"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	command -v unzip >/dev/null 2>&1 || missing="$$missing unzip"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

pytest: install-test
	$(PY) -m pytest -m "not gpu" $(PYTEST_ARGS)

test: system-deps kube-bin lint pytest

bench: install system-deps kube-bin
	$(PY) -m bench.store
	$(PY) -m bench.agent_qos
	$(PY) -m bench.agent_overhead
	$(PY) -m bench.ingest
	$(PY) -m bench.reflector

# Needs Go (>= 1.26), npm and unzip; a no-op once the binaries are in the cache.
kube-bin:
	KUBE_CACHE="$(KUBE_CACHE)" bash hack/kube/build.sh

proto: install-test
	$(PY) -m controller.api.protogen

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist
