# The README's commands. `make test` and `make demo` build (or reuse) a virtual environment
# with torch from pip's configured index (the CPU build on CI) and the Triton pinned for the interpreter tier.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
TRITON_PIN ?= triton==3.6.0
STAMP := $(VENV)/.pagedmla-installed

.PHONY: test test-gpu demo bench lint clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(TORCH_PIN) $(TRITON_PIN)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,model]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -m "not gpu" -p no:cacheprovider tests

# On a GPU machine whose python already has torch and triton: no install, run from the source tree.
test-gpu:
	PYTHONPATH=src $(PYTHON) -m pytest -q -m gpu tests

demo: $(STAMP)
	$(PY) -m pagedmla.cli demo

bench:
	PYTHONPATH=src $(PYTHON) -m pagedmla.cli bench all --json bench-out/results.json --csv bench-out/results.csv --plot bench-out/roofline.png

lint: $(STAMP)
	$(PY) -m pip install -q ruff && $(VENV)/bin/ruff check src tests benchmarks scripts

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
