# gpu-platform developer commands. `make preflight` and `make test` are the README's two commands.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= gcp-prod
STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))

.PHONY: venv checkov-venv training-venv jupyterhub-venv preflight preflight-all preflight-ci test test-live bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@echo "Building $(VENV) from requirements-dev.txt (first run only, a few minutes; pip prints what it installs)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar off -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

# checkov pins boto3/packaging versions that clash with ours: it gets a virtualenv of its own.
.venv-checkov/.installed: requirements-checkov.txt
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/python -m pip install --quiet --upgrade pip
	.venv-checkov/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

checkov-venv: .venv-checkov/.installed

# The example training program (torch, fsspec/s3fs) runs in its own virtualenv, as in its image:
# s3fs's aiobotocore pins a botocore that clashes with the program's boto3.
.venv-training/.installed: examples/training/requirements.txt
	$(PYTHON) -m venv .venv-training
	.venv-training/bin/python -m pip install --quiet --upgrade pip
	.venv-training/bin/python -m pip install --quiet -r examples/training/requirements.txt
	touch $@

training-venv: .venv-training/.installed

# The JupyterHub login test runs the real hub from its own virtualenv (requirements-jupyterhub.txt says why).
.venv-jupyterhub/.installed: requirements-jupyterhub.txt
	$(PYTHON) -m venv .venv-jupyterhub
	.venv-jupyterhub/bin/python -m pip install --quiet --upgrade pip
	.venv-jupyterhub/bin/python -m pip install --quiet -r requirements-jupyterhub.txt
	touch $@

jupyterhub-venv: .venv-jupyterhub/.installed

## Plan a stack offline: the verdict (policies, cluster fit, cost vs budget) first; STACK=gcp-prod by default.
PREFLIGHT_FLAGS ?=
preflight: venv
	$(PY) -m preflight $(STACK) $(PREFLIGHT_FLAGS)

preflight-all: venv
	@for s in $(STACKS); do $(PY) -m preflight $$s --quiet || exit $$?; done

## CI (network): pull the pinned charts, then preflight every stack, each writing
## build/<stack>/preflight.json (`python -m preflight summary build` tabulates them); fails if any fails.
preflight-ci: venv
	$(PY) -m preflight charts pull --dest build/charts
	@rc=0; for s in $(STACKS); do GPU_PLATFORM_CHARTS=build/charts $(PY) -m preflight $$s || rc=1; done; exit $$rc

## The whole offline test suite (live cloud tests are skipped without credentials).
test: venv checkov-venv training-venv jupyterhub-venv
	$(PY) -m pytest -q -n 2 tests

test-live: venv
	$(PY) -m pytest -q -m live tests

## Preflight wall time per stack, chart rendering included (target: under 6 s each on 2 cores).
bench: venv
	$(PY) -m preflight.bench $(STACKS)

clean:
	rm -rf build .pytest_cache
