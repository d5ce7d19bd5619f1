# The two commands of README.md.  Both install what they need first.
PYTHON ?= python3
EXAMPLES := $(wildcard examples/*.jsonl)

.PHONY: setup run conform test bench clean

setup:            ## install ccdiff (editable, with test tools) and build every pinned stack
	$(PYTHON) -m pip install --quiet -e ".[test]"
	$(PYTHON) -m ccdiff build all

run: setup        ## the main job: closed-loop conformance (10 seeds) + the examples' matrix and report
	$(PYTHON) -m ccdiff stacks
	$(PYTHON) -m ccdiff conform --seeds 10 --out reports/conform; \
	  code=$$?; $(PYTHON) -m ccdiff matrix $(EXAMPLES) --json reports/matrix.json --report reports/html; \
	  exit $$code

conform: setup    ## the nightly: every scenario x every built stack x 100 seeds (scenarios/)
	$(PYTHON) -m ccdiff conform --seeds 100 --out reports/conform

test: setup       ## the test suite
	$(PYTHON) -m pytest -q -n 2

bench: setup      ## the benchmark suite, one table (not part of the tests; ~10 min)
	$(PYTHON) bench/run_all.py

clean:
	rm -rf build reports/*.json
