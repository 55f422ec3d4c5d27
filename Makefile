# The two commands of the README:
#   make run    creates the environment and runs every study notebook (quick profile) into outputs/
#   make test   creates the environment and runs the tests (what .ci/run calls)
# Options: PROFILE=smoke|quick|standard|paper, ONLY="random_pruning ...", JOBS=1 (one study at a time; default 2 side by side), PYTHON=python3.11, HEADPRUNE_DATA_DIR=<data root>, TORCH_INDEX=<pip index for torch>

PYTHON ?= python3
VENV ?= .venv
PROFILE ?= quick
ONLY ?=
JOBS ?= 2
# a pip index to take torch from first (e.g. PyTorch's CPU-only wheel index on a Linux machine without a GPU)
TORCH_INDEX ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# real data beside the checkout (../shared/data) when present; the user's own setting wins
HEADPRUNE_DATA_DIR ?= $(if $(wildcard ../shared/data/glue),$(abspath ../shared/data),)
export HEADPRUNE_DATA_DIR
export TRANSFORMERS_VERBOSITY ?= error
export HF_HUB_DISABLE_PROGRESS_BARS ?= 1

.PHONY: env run render test test-paper test-fast bench lab summary report clean-env

env: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned in pyproject.toml (torch==2.13.0); TORCH_INDEX=<index> takes that build of it first
	$(if $(TORCH_INDEX),$(PY) -m pip install --quiet "torch==2.13.0" --index-url $(TORCH_INDEX),)
	$(PY) -m pip install --quiet -e ".[dev,ray]"
	$(PY) -m ipykernel install --sys-prefix --name headprune --display-name "Python 3 (headprune)" >/dev/null
	touch $(STAMP)

run: env
	$(PY) -m headprune_utils.run --profile $(PROFILE) --jobs $(JOBS) $(if $(ONLY),--only $(ONLY),)

# the notebooks re-rendered from the stored (e.g. committed standard) cells only; stops, naming them, if any is missing
render: env
	$(PY) -m headprune_utils.run --profile $(PROFILE) --jobs $(JOBS) --from-cells $(if $(ONLY),--only $(ONLY),)

# the cross-study summary (outputs/SUMMARY.md for quick) from the committed verdict tables; make run writes it too
summary: env
	$(PY) -m headprune_utils.run.summary --profile $(PROFILE)

# the static HTML report (outputs/report/) from the committed outputs: every profile there is, or PROFILE=... only
report: env
	$(PY) -m headprune_utils.run.report $(if $(filter command line environment,$(origin PROFILE)),--profile $(PROFILE),)

test: env
	$(PY) -m pytest -q -ra

# every study notebook under the paper profile's parameters (a random bert-base-shaped model, a handful of examples;
# offline): the profile's plumbing checked before GPU hours are spent on it (tens of minutes on 2 cores)
test-paper: env
	HEADPRUNE_PAPER_TEST=1 $(PY) -m pytest -q -ra tests/smoke/test_paper_profile.py

test-fast: env
	$(PY) -m pytest -q -ra -m "not smoke and not model and not data and not browser"

bench: env
	$(PY) benchmarks/finetune_throughput.py

# JupyterLab at the repository root: notebooks/ to run, outputs/ to read the executed ones (the data root is the
# package's default, ../shared/data beside the checkout, or HEADPRUNE_DATA_DIR, exported above for the kernels).
# As root (e.g. in a container) JupyterLab refuses to start without --allow-root: it is passed then, and only then.
LAB_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)
lab: env
	$(VENV)/bin/jupyter lab --notebook-dir=. $(LAB_ROOT)

clean-env:
	rm -rf $(VENV)
