# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# The venv is created once; pip runs again only when pyproject.toml or constraints.txt change.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SHELL  := bash
.SHELLFLAGS := -eo pipefail -c
# This machine's pip config lists local index folders that do not all exist; drop that noise only.
QUIET  := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test install install-test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(PY) pyproject.toml constraints.txt
	$(PIP) -e . $(QUIET)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) -e '.[test,benchmarks]' $(QUIET)
	@# tests/test_docker.py validates docker/compose.yaml with a compose client (no engine needed)
	@command -v docker-compose >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] || \
		{ apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null; } || \
		echo "warning: could not install docker-compose; tests/test_docker.py will say so"
	touch $@

# numba compiles the curation kernels (the modules below) once per installation, ~20 s on 2 cores,
# into __pycache__ beside them: no night's first call pays it. Again when one of them changes.
KERNEL_SOURCES := $(addprefix lib/curation/,kernels.py text.py minhash.py dedup.py precompile.py)
$(VENV)/.kernels: $(VENV)/.installed $(KERNEL_SOURCES)
	$(PY) -m lib.curation.precompile
	touch $@

install: $(VENV)/.installed $(VENV)/.kernels
install-test: $(VENV)/.installed-test $(VENV)/.kernels

demo: $(VENV)/.installed $(VENV)/.kernels
	$(VENV)/bin/consolidate demo

test: $(VENV)/.installed-test $(VENV)/.kernels
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed-test $(VENV)/.kernels
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) workspace .pytest_cache
