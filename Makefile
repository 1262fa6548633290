# `make sweep` runs the main job, `make test` the tests; each sets up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch is pinned for set-up here; GPU users: make TORCH_SPEC='torch>=2.4' ...
TORCH_SPEC ?= torch==2.13.0
SWEEP ?= size=64,1024,4096 compile=true,false
# Two test processes, a test file each at a time: one runs its sweep's jobs while the other
# analyses (jobs still take turns on the device). TEST_WORKERS= runs them one at a time.
TEST_WORKERS ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: sweep test clean-venv gpu-evidence FORCE

# The torch asked for is part of what the set-up remembers: another TORCH_SPEC reinstalls.
$(VENV)/.torch-spec: FORCE
	@mkdir -p $(VENV)
	@[ "$$(cat $@ 2>/dev/null)" = "$(TORCH_SPEC)" ] || echo "$(TORCH_SPEC)" > $@

$(VENV)/.installed: pyproject.toml $(VENV)/.torch-spec
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

sweep: $(VENV)/.installed
	$(PY) experiments/run.py -m $(SWEEP)

test: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir $(VENV)/site
	$(PY) -m pytest -q $(TEST_WORKERS)

clean-venv:
	rm -rf $(VENV)

# Part 1 and Part 2 on a GPU machine with its own torch: make gpu-evidence OUT=docs/results/h200
gpu-evidence:
	bash scripts/gpu_evidence.sh $(OUT)
