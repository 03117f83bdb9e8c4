# The two commands of the README. Each sets everything up first (idempotent).
.PHONY: setup serve test lint

setup:
	@./scripts/bootstrap.sh

serve: setup
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE:-1} .venv/bin/sift serve

lint: setup
	.venv/bin/ruff check server sdk bench tests scripts experiments probes
	.venv/bin/ruff format --check server sdk bench tests scripts experiments probes
	.venv/bin/mypy server/src sdk/src bench/src

test: setup lint
	@./scripts/run-tests.sh
