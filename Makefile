# The two commands of README.md.  Both install what they need first.
PYTHON ?= python3
EXAMPLES := $(wildcard examples/*.jsonl)

.PHONY: setup run test bench clean

setup:            ## install ccdiff (editable, with test tools) and build every pinned stack
	$(PYTHON) -m pip install --quiet -e ".[test]"
	$(PYTHON) -m ccdiff build all

run: setup        ## the main job: every example through every built stack, as a matrix
	$(PYTHON) -m ccdiff stacks
	$(PYTHON) -m ccdiff matrix $(EXAMPLES) --json reports/matrix.json --report reports/html

test: setup       ## the test suite
	$(PYTHON) -m pytest -q -n 2

bench: setup      ## benchmarks (not part of the tests)
	$(PYTHON) bench/bench_oracle.py
	$(PYTHON) bench/bench_adapters.py

clean:
	rm -rf build reports/*.json
