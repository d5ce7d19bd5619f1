# The two commands of README.md.  Both install what they need first, through the one
# setup step (setup/install.sh, from the one package list setup/debian-packages.txt).
# PYTHON is the interpreter ccdiff is installed into: setup/python picks the project's
# .venv when setup had to make one (a Debian python, PEP 668), else python3.
PYTHON ?= ./setup/python
EXAMPLES := $(wildcard examples/*.jsonl)

.PHONY: setup setup-test run conform test bench clean

setup:            ## make, git, ccdiff (editable) with its Python packages, every pinned stack built
	bash setup/install.sh run

setup-test:       ## setup + what the tests use: chromium, AFL++, clang, lld, sanitizer runtimes, honggfuzz
	bash setup/install.sh test

run: setup        ## the main job: closed-loop conformance (10 seeds) + the examples' matrix and report
	$(PYTHON) -m ccdiff stacks
	@# make turns any failing recipe into its own exit 2, so findings (ccdiff's exit 1) are
	@# reported here and exit 0; 2 stays "could not run".  `ccdiff conform` alone exits 1.
	@conform=0; matrix=0; \
	  $(PYTHON) -m ccdiff conform --seeds 10 --out reports/conform || conform=$$?; \
	  $(PYTHON) -m ccdiff matrix $(EXAMPLES) --json reports/matrix.json --report reports/html || matrix=$$?; \
	  if [ $$conform -gt 1 ] || [ $$matrix -gt 1 ]; then \
	    echo "make run: ERROR (conform exit $$conform, matrix exit $$matrix)"; exit 2; fi; \
	  if [ $$conform -eq 1 ] || [ $$matrix -eq 1 ]; then \
	    echo "make run: done, with findings: reports/conform/summary.json, reports/html/index.html"; \
	  else echo "make run: done, no findings"; fi

conform: setup    ## the nightly: every scenario x every built stack x 100 seeds (scenarios/)
	$(PYTHON) -m ccdiff conform --seeds 100 --out reports/conform

test: setup-test  ## the test suite
	$(PYTHON) -m pytest -q -n 2

bench: setup-test ## the benchmark suite, one table (not part of the tests; ~45 min: 10M-event memory runs)
	$(PYTHON) bench/run_all.py

clean:
	rm -rf build reports/*.json
