# computeboard — run `make` for the list of targets.
SHELL := /bin/bash
GO    ?= go
PKGS  := ./...
CONFIG ?= config/demo.yaml

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  make %-11s %s\n",$$1,$$2}'

build: ## Build bin/adapter
	$(GO) build -o bin/adapter ./cmd/adapter

run: ## Run the adapter on the embedded blackboard (nothing else needed)
	$(GO) run ./cmd/adapter serve --config $(CONFIG)

deps: ## Install what the tests need (redis-server, python3-redis) if missing
	@scripts/ensure-deps.sh

test: deps ## Install what is missing, then run every test with the race detector
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

test-short: deps ## Unit tests only (skips integration/)
	$(GO) test -short -count=1 $(PKGS)

bench: deps ## Benchmarks: blackboard, broker intake, engine (see README for reading them)
	scripts/bench.sh

sim: ## Run the shipped simulator traces
	$(GO) run ./cmd/adapter sim examples/traces/shares-1-2-5.json --compare all

lint: ## go vet + gofmt check
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

rewrite: ## Refresh the engine's golden scenario files
	$(GO) test ./engine/... -rewrite

tidy: ## go mod tidy
	$(GO) mod tidy

.PHONY: help build run deps test test-short bench sim lint rewrite tidy
