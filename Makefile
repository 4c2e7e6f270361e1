.PHONY: setup run test lint typecheck proto proto-check bench clean

# Sets up .venv, llama.cpp and buf; does nothing when already done.
setup:
	@scripts/setup.sh

# Starts the local platform on embedded defaults (no etcd, Redis or PostgreSQL needed).
run: setup
	.venv/bin/chatctl up

# Sets up, installs the servers the tests start (and vLLM's CPU build, in .vllm/, and checkov,
# the manifests' security lint, in .checkov/), and runs every test.
test: setup
	@scripts/services.sh
	@scripts/install_vllm.sh
	@scripts/install_checkov.sh || echo "checkov could not be installed: its manifest test will say so and skip"
	.venv/bin/python -m pytest

lint: setup typecheck
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	node_modules/.bin/buf lint

# mypy over the product packages: strict on domain/ and the gateway's core, the rest leniently
# (pyproject.toml's [tool.mypy] says which is which). Its cache is under build/.
typecheck: setup
	.venv/bin/mypy

# Regenerates gen/ from proto/. Never edit gen/ by hand.
proto: setup
	scripts/gen_proto.sh

# Fails when gen/ does not match proto/.
proto-check: setup
	@rm -rf build/gen-check && scripts/gen_proto.sh build/gen-check
	@diff -r gen/chat build/gen-check/chat && echo "gen/ matches proto/"

bench: setup
	.venv/bin/python bench/picker.py
	.venv/bin/python bench/sim.py
	.venv/bin/python bench/hops.py
	.venv/bin/python bench/sidecar.py
	.venv/bin/python bench/edge.py
	.venv/bin/python bench/gateway_cost.py
	.venv/bin/python bench/grpc_floor.py
	.venv/bin/python bench/race.py
	.venv/bin/python bench/sim_region.py
	.venv/bin/python bench/responses_resume.py
	.venv/bin/python bench/prompt_capture.py

clean:
	rm -rf build .pytest_cache .ruff_cache
