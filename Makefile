# make grade [SOLUTIONS=dir] [EX="ex1 quiz"]   grade a folder of solutions (default: exercises/)
#            [JOBS=n] [TIMEOUT=s] [NO_CACHE=1]  parallel exercises, seconds per exercise, no compilation cache
#            [SEED=n] [VERBOSE=1]             repeat a run's drawn configurations; list every check
#            [KEEP_SERVER=0]                  start no fork server to keep for the next run (see README)
# make reference                              grade reference/ (instructor check: full marks)
# make test                                   the package's own tests (graders vs reference, stubs, wrong answers)
# make test-course                            the slow course tests (release, autograder, batch); CI runs both
# make watch [SOLUTIONS=dir] [EX="ex2"]       grade, then re-grade each exercise when its file is saved
# make bench                                  cold/warm/edit-loop grading times of the reference
# make release [SELF_STUDY=1]                 the students' copy in dist/student/: public checks, no solutions, no quiz key
#                                             or explanations (SELF_STUDY=1: the full checks, for self-study)
# make autograder [MINUTES=10]                dist/autograder.zip for Gradescope (MINUTES: the assignment's timeout)
#                 [EX="ex1 ex2 quiz"]          the assignment's exercises (default: all)
#                 [AFTER_DUE="quiz ex7:name"]  results students see only after the due date (default: quiz; none)
#                 [SEED=per-submission]        each submission's own seed (default: one per image)
# make clean                                  remove .venv and caches; stop the kept fork servers
SHELL := /bin/bash
SOLUTIONS ?= exercises
EX ?=
JOBS ?=
TIMEOUT ?=
NO_CACHE ?=
SEED ?=
VERBOSE ?=
MINUTES ?=
AFTER_DUE ?=
SELF_STUDY ?=
KEEP_SERVER ?=
# make puts variables given on its command line into every recipe's environment; the runner
# reads them as arguments, and in its environment they would make each EX=... a kept fork
# server of its own (graders/runner/kept_server.py).
unexport EX SOLUTIONS JOBS TIMEOUT NO_CACHE SEED VERBOSE MINUTES AFTER_DUE KEEP_SERVER SELF_STUDY
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Interpreters tried in order; the first that runs and is >= 3.12 builds the venv.
# A pyenv shim can exist on PATH and still refuse to run, so each one is executed, not just located.
PY_CANDIDATES := python3.14 python3.13 python3.12 python3 $(sort $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3))

# Targets that need the full package; the students' copy (make release) has no reference/ or tests/.
FULL_PACKAGE = @if [ ! -d reference ] || [ ! -d tests ]; then echo "make $@ needs the full package (reference/ and tests/); this is the students' copy, which grades with make grade and make watch."; exit 2; fi

GRADE_ARGS := $(EX) --solutions $(SOLUTIONS) $(if $(JOBS),--jobs $(JOBS)) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(NO_CACHE),--no-cache) $(if $(SEED),--seed $(SEED)) $(if $(VERBOSE),-v)

.PHONY: grade reference test test-course bench clean venv watch release autograder
grade: $(STAMP)
	@$(if $(filter 0,$(KEEP_SERVER)),GRADERS_NO_RESIDENT=1 )$(PY) -m graders $(GRADE_ARGS)

watch: $(STAMP)
	@$(PY) -m graders watch $(EX) --solutions $(SOLUTIONS) $(if $(JOBS),--jobs $(JOBS)) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(NO_CACHE),--no-cache) $(if $(SEED),--seed $(SEED))

reference:
	$(FULL_PACKAGE)
	@$(MAKE) --no-print-directory grade SOLUTIONS=reference

test: $(STAMP)
	$(FULL_PACKAGE)
	$(PY) -m pytest -m "not course"

test-course: $(STAMP)
	$(FULL_PACKAGE)
	$(PY) -m pytest -m course

bench: $(STAMP)
	$(FULL_PACKAGE)
	$(PY) -m graders.course.bench

venv: $(STAMP)

release: $(STAMP)
	$(FULL_PACKAGE)
	$(PY) -m graders.course.bundle release --out dist/student $(if $(filter 1,$(SELF_STUDY)),--self-study)

autograder: $(STAMP)
	$(FULL_PACKAGE)
	$(PY) -m graders.course.bundle autograder --out dist/autograder.zip $(if $(MINUTES),--minutes $(MINUTES)) \
	  $(if $(EX),--ex "$(EX)") $(if $(AFTER_DUE),--after-due "$(AFTER_DUE)") \
	  $(if $(filter per-submission,$(SEED)),--seed-per-submission,$(if $(SEED),$(error SEED for make autograder: per-submission, or leave it out)))

$(STAMP): pyproject.toml
	@set -e; found=""; \
	for c in $(PY_CANDIDATES); do \
	  if $$c -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then found=$$c; break; fi; \
	done; \
	if [ -z "$$found" ]; then \
	  echo "No Python >= 3.12 found (tried: $(PY_CANDIDATES))."; \
	  echo "JAX 0.12 needs Python 3.12 or newer: install python3.12 or python3.13 (e.g. 'pyenv install 3.13') and run make again."; \
	  exit 1; \
	fi; \
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then rm -rf $(VENV); fi; \
	if [ ! -x $(PY) ]; then echo "Creating $(VENV) with $$found ($$($$found -c 'import sys; print(sys.version.split()[0])'))"; $$found -m venv $(VENV); fi; \
	$(PY) -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > $(VENV)/requirements.txt; \
	echo "Installing pinned packages into $(VENV) (the first time: about 170 MB to download)"; \
	$(PY) -m pip install --quiet --disable-pip-version-check -r $(VENV)/requirements.txt; \
	touch $(STAMP)

clean:
	@if [ -x $(PY) ]; then $(PY) -c "from graders.runner import kept_server; kept_server.stop_all()" || true; fi
	rm -rf $(VENV) .cache .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
