# computeboard — run `make` for the list of targets.
SHELL := /bin/bash
GO    ?= go
PKGS  := ./...
CONFIG ?= config/demo.yaml

.DEFAULT_GOAL := help

# go-nvml's C header uses deprecated declarations; its cgo build warns
# about each one. Quiet, not hidden: real errors still fail the build.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  make %-11s %s\n",$$1,$$2}'

build: ## Build bin/adapter and bin/cb-supervisor (each job's supervisor; the adapter finds it next to itself)
	$(GO) build -o bin/adapter ./cmd/adapter
	$(GO) build -o bin/cb-supervisor ./cmd/cb-supervisor

run: build ## Run the adapter on the embedded blackboard (nothing else needed)
	bin/adapter serve --config $(CONFIG)

deps: ## Install what the tests need (redis-server, gcc, python3-redis, chromium, Slurm; the Kubernetes control plane, built once) if missing
	@scripts/ensure-deps.sh

test: deps ## Install what is missing, then run every test with the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	@GO=$(GO) scripts/test-unprivileged.sh
	@GO=$(GO) scripts/test-python.sh

test-python: deps ## The Python client's tests (clients/python) against a real Redis and adapter
	@GO=$(GO) scripts/test-python.sh

test-short: deps ## Unit tests only (skips integration/)
	$(GO) test -short -count=1 $(PKGS)

bench: deps ## Benchmarks: post→durable job vs asynq, blackboard, broker hand-off, engine, pool, end to end (see README)
	scripts/bench.sh

sim: ## Run the shipped simulator traces
	$(GO) run ./cmd/adapter sim examples/traces/shares-1-2-5.json --compare all

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: ## go vet, gofmt, staticcheck, and no wall clock or global rand in the engine, blackboard, broker, jobs
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) $(PKGS)
	@out=$$(git grep -n -E 'time\.Now\(\)|"math/rand"|math/rand/v2"\.(Int|Float)' -- 'engine/*.go' 'blackboard/*.go' 'broker/*.go' 'jobs/*.go' ':!*_test.go' ':!engine/sim/*'); \
	  if [ -n "$$out" ]; then echo "wall clock or global randomness where only the Clock or a seeded source belongs:"; echo "$$out"; exit 1; fi

rewrite: ## Refresh the engine's golden scenario files
	$(GO) test ./engine/... -rewrite

tidy: ## go mod tidy
	$(GO) mod tidy

.PHONY: help build run deps test test-short test-python bench sim lint rewrite tidy
