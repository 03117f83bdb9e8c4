# The two commands of the README. Each sets everything up first (idempotent).
.PHONY: setup serve test lint
SHELL := bash
LINT_PATHS := server sdk bench tests scripts probes
LINT := .venv/bin/ruff check $(LINT_PATHS) && .venv/bin/ruff format --check $(LINT_PATHS) && \
	.venv/bin/mypy server/src sdk/src bench/src

setup:
	@./scripts/bootstrap.sh

serve: setup
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE:-1} .venv/bin/sift serve

lint: setup
	$(LINT)

# Lint runs beside the suite, not before it, at the lowest priority: mypy's first run (no cache yet)
# takes about half a minute on one core, and the suite leaves some of the CPU idle while it waits
# on servers. Lint's output follows the suite's; either failing fails the target.
test: setup
	@lint_log=$$(mktemp); \
	{ echo '$(LINT)'; nice -n 19 bash -c '$(LINT)'; } >"$$lint_log" 2>&1 & lint_pid=$$!; \
	./scripts/run-tests.sh; tests=$$?; \
	wait $$lint_pid; lint=$$?; \
	cat "$$lint_log"; rm -f "$$lint_log"; \
	if [ $$lint -ne 0 ]; then echo "sift: lint failed" >&2; fi; \
	[ $$lint -eq 0 ] && [ $$tests -eq 0 ]
