# gpu-platform developer commands. `make preflight` and `make test` are the README's two commands.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= gcp-prod
STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))

.PHONY: dist venv lock checkov-venv training-venv jupyterhub-venv preflight preflight-all preflight-ci rehearse check test test-live bench bench-tests clean

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	@echo "Building $(VENV) from requirements-dev.txt (first run only, a few minutes; pip prints what it installs)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# The dev lock: the program's lock (requirements.txt) plus the test tools, every package hashed, so pip
	@# checks every download and resolves nothing (requirements-dev.in says how it is made: `make lock`).
	$(PY) -m pip install --progress-bar off --require-hashes -r requirements-dev.txt
	@# The package itself, editable: `import gpu_platform` from anywhere and the console scripts
	@# (gpu-platform-preflight, gpu-platform-costs) in $(VENV)/bin. Offline: setuptools is pinned above, and
	@# --no-deps: its dependencies came from the lock (an editable install cannot be hash-checked).
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

venv: $(VENV)/.installed

## Regenerate the locks from requirements*.in (network: PyPI; tests never run it): requirements.txt (the program's,
## what `pulumi install` and `make venv` install), requirements-dev.txt (that plus the test tools, constrained to
## it) and the policy pack's gpu_platform/policies/requirements.txt (constrained to it). Each is universal (one
## file for every Python pyproject.toml's requires-python allows and every platform, with environment markers)
## and hashed. Pins already in a lock are kept (uv prefers them); LOCK_FLAGS="--upgrade-package grpcio" moves one
## transitive dependency, LOCK_FLAGS=--upgrade all of them.
LOCK_PYTHON := 3.11
LOCK_FLAGS ?=
# $(1) the .in file, $(2) the lock, $(3) more flags (a constraint). The header says what the file is; uv's own
# lines below it name the command (Dependabot and other tools read them).
define compile_lock
$(VENV)/bin/uv pip compile --quiet --universal --generate-hashes --python-version $(LOCK_PYTHON) \
  --custom-compile-command "make lock" $(LOCK_FLAGS) $(3) $(1) -o $(2)
sed -i '1i \# DO NOT EDIT BY HAND: the lock of $(1) (every package, transitive ones included, pinned with\n\# its sha256 hashes). Change $(1), then run `make lock` (Makefile; uv pip compile --universal --generate-hashes).' $(2)
endef
lock: venv
	$(call compile_lock,requirements.in,requirements.txt)
	$(call compile_lock,requirements-dev.in,requirements-dev.txt,-c requirements.txt)
	$(call compile_lock,gpu_platform/policies/requirements.in,gpu_platform/policies/requirements.txt,-c requirements.txt)

# Tools whose dependencies clash with the program's get a virtualenv each, built by one recipe:
# $(1) folder, $(2) requirements file. uv (pinned in the dev lock) installs them, not pip: it unpacks each wheel
# as it downloads and hard-links the files from its cache, where pip keeps every downloaded wheel until the end
# and then writes a second, unpacked copy. For the training virtualenv (torch and its CUDA libraries) that is
# 4.7 GB at the peak instead of 7.5 GB, and 25 s instead of 90 s (measured 2026-11-29; CI's run of that day ran
# out of disk under pip with 7 GiB free). No pip in them: `make <name>-venv` is how they are (re)built.
define side_venv
$(1)/.installed: $(2) | $(VENV)/.installed
	rm -rf $(1)
	$$(PYTHON) -m venv --without-pip $(1)
	$(VENV)/bin/uv pip install --quiet --python $(1)/bin/python -r $(2)
	touch $$@
endef
# checkov pins boto3 and packaging versions that clash with ours.
$(eval $(call side_venv,.venv-checkov,requirements-checkov.txt))
# The example training program (torch, fsspec/s3fs), as in its image: s3fs's aiobotocore pins a
# botocore that clashes with the program's boto3.
$(eval $(call side_venv,.venv-training,examples/training/requirements.txt))
# The JupyterHub login test's real hub (requirements-jupyterhub.txt says why).
$(eval $(call side_venv,.venv-jupyterhub,requirements-jupyterhub.txt))

checkov-venv: .venv-checkov/.installed
training-venv: .venv-training/.installed
jupyterhub-venv: .venv-jupyterhub/.installed

## Plan a stack offline: the verdict (policies, cluster fit, cost vs budget) first; STACK=gcp-prod by default.
PREFLIGHT_FLAGS ?=
## Without --charts, `charts ensure` first: on a fresh clone with no chart folder ($GPU_PLATFORM_CHARTS,
## ../shared/charts) it pulls the pinned charts into the user cache once, or says how to fill one.
preflight: venv
	$(if $(findstring --charts,$(PREFLIGHT_FLAGS)),,$(PY) -m gpu_platform.preflight charts ensure)
	$(PY) -m gpu_platform.preflight $(STACK) $(PREFLIGHT_FLAGS)

preflight-all: venv
	@for s in $(STACKS); do $(PY) -m gpu_platform.preflight $$s --quiet || exit $$?; done

## Preflight, then rehearse STACK on a throwaway local control plane with the platform's controllers
## (docs/rehearsal.md): exit 3 if any workload, scenario or controller fails. The components come from
## `make rehearsal-build` (the rehearsal names any that are missing).
## ENGINE=pulumi: deploy the stack's Kubernetes layer with the real `pulumi up` instead, then a second up that
## must change nothing and destroy (docs/rehearsal.md "The Pulumi engine"); writes build/STACK/engine.json.
ENGINE ?= rehearsal
rehearse: venv rehearsal-build $(if $(filter pulumi,$(ENGINE)),engine-build,jupyterhub-venv)
	$(PY) -m gpu_platform.preflight $(STACK) --rehearse --engine $(ENGINE) $(PREFLIGHT_FLAGS)

## CI (network): pull the pinned charts, then preflight every stack, each writing
## build/<stack>/preflight.json (`python -m gpu_platform.preflight summary build` tabulates them); fails if any fails.
# BASE=DIR: a base branch's preflight-ci output (its build/): each stack it planned is compared with it (--base);
# a stack it did not plan (new in this branch) is planned without a comparison, and says so.
BASE ?=
preflight-ci: venv
	$(PY) -m gpu_platform.preflight charts pull --dest build/charts
	@rc=0; for s in $(STACKS); do \
	  base=""; \
	  if [ -n "$(BASE)" ]; then \
	    if [ -e "$(BASE)/$$s/plan.json" ]; then base="--base $(BASE)"; \
	    else echo "preflight-ci: $(BASE) has no plan of $$s (a stack new in this branch, or the base run did not plan it): not compared"; fi; \
	  fi; \
	  GPU_PLATFORM_CHARTS=build/charts $(PY) -m gpu_platform.preflight $$s $$base || rc=1; \
	done; exit $$rc

## Differential check of cluster fit (docs/rehearsal.md): every shipped stack and N hypothesis-generated ones
## (SEED fixed), fit's answers vs one real control plane per cloud; build/differential.json; exit 3 on a disagreement.
N ?= 200
SEED ?= 20261124
.PHONY: differential
differential: venv rehearsal-build
	$(PY) -m gpu_platform.rehearsal.differential --generated $(N) --seed $(SEED)

## Build the rehearsal's Kubernetes components (etcd, kube-apiserver, KWOK, Kueue, ...) from the Go modules
## pinned in rehearsal/components.lock.toml into $GPU_PLATFORM_REHEARSAL_CACHE/bin (default
## ${XDG_CACHE_HOME:-~/.cache}/gpu-platform/rehearsal/bin); an unchanged lock rebuilds nothing (docs/rehearsal.md).
## Needs only Go 1.26 and the standard library's Python; `rehearse: rehearsal-build` reuses it.
.PHONY: rehearsal-build
rehearsal-build:
	$(PYTHON) rehearsal/build.py

## The Pulumi engine alone (CLI, Python language host, Kubernetes provider; rehearsal-build builds it too:
## docs/rehearsal.md "The Pulumi engine").
.PHONY: engine-build
engine-build:
	$(PYTHON) rehearsal/build.py pulumi pulumi-language-python pulumi-resource-kubernetes

## pytest with `--dist loadgroup`: each stack's rehearsal tests go to one worker together and share one cluster
## there (tests/rehearsal_support.py); every other test goes with its module (tests/conftest.py).
PYTEST := $(PY) -m pytest -q --dist loadgroup
## `make check`: one worker more than there are cores, at most eight (each imports the cloud SDKs). Its tests wait
## on subprocesses (preflight, promtool, etcd, helm) part of the time: on 2 cores two workers kept 1.6 cores busy
## (293 s), three 1.95 (237 s; 2026-11-30). `make test` is mostly the rehearsal, which waits on its controllers far
## more than it computes: four workers let the four stacks' clusters run side by side.
CHECK_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 1) + 1 )); [ $$n -le 8 ] || n=8; echo $$n)
TEST_WORKERS ?= 4

## The quick lane for every edit (target: under 3 minutes on 2 cores): the whole suite except the rehearsal
## (Go components), the tests that compile Go (`gobuild`: over a minute of a first run on a fresh machine, Go's build
## cache empty) and the tools in their own virtualenvs (checkov, the training program, JupyterHub); property
## tests draw a quarter of their examples (GPU_PLATFORM_TEST_LANE, tests/conftest.py lane_examples).
check: venv
	GPU_PLATFORM_TEST_LANE=check $(PYTEST) -n $(CHECK_WORKERS) -m "not live and not rehearsal and not sidevenv and not gobuild" tests

## The whole offline test suite, what CI runs (target: under 20 minutes on 2 cores with the components and
## virtualenvs built; live cloud tests are skipped without credentials). The 25 slowest tests are listed last.
## Without a chart folder ($GPU_PLATFORM_CHARTS, ../shared/charts) the user cache is filled first when the
## network allows; offline, `charts ensure` says how to fill one and the chart tests skip saying the same
## (with GPU_PLATFORM_REQUIRE_CHARTS=1, as CI sets it, a failed pull fails here and a missing chart fails its test).
test: venv checkov-venv training-venv jupyterhub-venv rehearsal-build
	$(if $(filter 1,$(GPU_PLATFORM_REQUIRE_CHARTS)),,-)$(PY) -m gpu_platform.preflight charts ensure
	$(PYTEST) -n $(TEST_WORKERS) --no-loadscope-reorder --durations=25 tests

test-live: venv
	$(PY) -m pytest -q -m live tests

## Preflight wall time per stack, chart rendering included (target: under 6 s each on 2 cores).
## Then `preflight --rehearse` per stack (target: under 3 min each with the components built; docs/rehearsal.md).
bench: venv
	$(PY) -m gpu_platform.preflight.bench $(STACKS)
	$(PY) -m gpu_platform.rehearsal.bench $(STACKS)

## Wall time of `make check` and `make test` (prerequisites built first, untimed) against their targets,
## with the date, the machine and its load; build/bench-tests.json. The README's test times come from it.
bench-tests: venv checkov-venv training-venv jupyterhub-venv rehearsal-build
	$(PYTHON) tools/bench_tests.py

## The release wheel into dist/, built offline with the pinned setuptools (pyproject.toml).
dist: venv
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist .

clean:
	rm -rf build dist .pytest_cache *.egg-info
