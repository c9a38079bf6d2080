# The one entry point for humans and CI. `make test` works on a fresh
# machine: it installs redis-server and redis-cli when they are missing.
GO ?= go
# Fuzz budgets are counts of executions, not durations: Go 1.26's fuzz
# coordinator can fail a run with "context deadline exceeded" (and no
# failing input) when a -fuzztime duration ends on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27). About 10 s each here.
FUZZTIME ?= 250000x
FUZZTIME_FRONTDOOR ?= 15000x
HELM ?= helm.sh/helm/v3/cmd/helm@v3.22.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test deps check unit fuzz bench

run:
	$(GO) run ./cmd/rlproxy

test: deps check unit fuzz

# Redis, and the client libraries of the other-language checks
# (internal/proxy/testdata/clients): redis-py from Debian, ioredis and
# node-redis from npm (they need Node.js 20 or later).
NODE_CHECKS := internal/proxy/testdata/clients/node

deps:
	@pkgs=""; \
	command -v redis-server >/dev/null || pkgs="$$pkgs redis-server"; \
	{ command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null; } || pkgs="$$pkgs redis-tools"; \
	{ python3 -c 'import redis' 2>/dev/null || /usr/bin/python3 -c 'import redis' 2>/dev/null; } || pkgs="$$pkgs python3-redis"; \
	if [ -n "$$pkgs" ]; then \
		echo "installing$$pkgs"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$pkgs; \
	fi
	@redis-server --version
	@command -v node >/dev/null || { echo "deps: Node.js 20 or later is needed for the client checks in $(NODE_CHECKS)"; exit 1; }
	@[ $(NODE_CHECKS)/node_modules/.package-lock.json -nt $(NODE_CHECKS)/package-lock.json ] || \
		(cd $(NODE_CHECKS) && { npm ci --no-audit --no-fund --loglevel=error || { sleep 5; npm ci --no-audit --no-fund --loglevel=error; }; })
	@command -v helm >/dev/null || [ -x "$$($(GO) env GOPATH)/bin/helm" ] || \
		{ echo "installing helm (the chart test: deploy/helm)"; $(GO) install $(HELM); }

check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt: these files need formatting:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd tools && $(GO) vet ./...

# tools/ is a module of its own (the load tool and the pictures keep their
# dependencies out of the product's go.mod), so ./... does not reach it.
unit:
	RLPROXY_REQUIRE_CLIENT_CHECKS=1 $(GO) test -race -count=1 -timeout 8m ./...
	cd tools && $(GO) test -count=1 -timeout 2m ./...

# A short run of each fuzz target (the seed corpus also runs in `unit`).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzParseSetRate$$' -fuzztime=$(FUZZTIME) ./commands
	$(GO) test -run='^$$' -fuzz='^FuzzParseAcquire$$' -fuzztime=$(FUZZTIME) ./commands
	$(GO) test -run='^$$' -fuzz='^FuzzFrontDoor$$' -fuzztime=$(FUZZTIME_FRONTDOOR) ./server
	$(GO) test -run='^$$' -fuzz='^FuzzParseGCRA$$' -fuzztime=$(FUZZTIME) ./commands
	$(GO) test -run='^$$' -fuzz='^FuzzParseLease$$' -fuzztime=$(FUZZTIME) ./commands
	$(GO) test -run='^$$' -fuzz='^FuzzParsePolicy$$' -fuzztime=$(FUZZTIME) ./commands

# The performance suite: rlproxy vs direct Redis side by side, every
# target of the performance issue, the chart, then the Go benchmarks;
# with RLS_REF_SRC set, the answers against envoyproxy/ratelimit too.
bench: deps
	GO=$(GO) bash tools/bench/bench.sh
	@[ -z "$(RLS_REF_SRC)" ] || $(MAKE) envoy-compare

# Answer by answer against envoyproxy/ratelimit (docs/envoy-compare.md):
# both on one redis-server over every rate limit config in its source tree
# RLS_REF_SRC (a checkout of envoyproxy/ratelimit at RLS_REF_REV), which is
# built here (minutes). Fails when an answer differs where the contract
# does not say why. Not in `test`: it needs that checkout and its build.
RLS_REF_REV ?= f2fb157
RLS_BUILD ?= $(CURDIR)/bench-results/envoy-compare
.PHONY: envoy-compare
envoy-compare:
	@[ -n "$(RLS_REF_SRC)" ] || { echo "envoy-compare: set RLS_REF_SRC to a checkout of envoyproxy/ratelimit at $(RLS_REF_REV)"; exit 1; }
	mkdir -p $(RLS_BUILD)
	$(GO) build -o $(RLS_BUILD)/rlproxy ./cmd/rlproxy
	cd tools && $(GO) build -o $(RLS_BUILD)/rlsside ./rlsside
	cd $(RLS_REF_SRC) && $(GO) build -o $(RLS_BUILD)/ratelimit ./src/service_cmd && $(GO) build -o $(RLS_BUILD)/config_check ./src/config_check_cmd
	$(RLS_BUILD)/rlsside compare -ref $(RLS_BUILD)/ratelimit -ref-check $(RLS_BUILD)/config_check -rlproxy $(RLS_BUILD)/rlproxy \
		-src $(RLS_REF_SRC) -rev $(RLS_REF_REV) -out docs/envoy-compare.md

# The README's picture of the five algorithms (and a limiter with two
# limits) under one bursty load: about
# 7 s of real time on a throwaway redis-server (the embedded backend when
# redis-server is not installed). See tools/rlviz.
.PHONY: chart-algorithms
chart-algorithms:
	cd tools && $(GO) run ./rlviz -out ../docs/algorithms.svg

# The container image: the static binary on an empty base (deploy/Containerfile).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
.PHONY: image
image:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o deploy/rlproxy ./cmd/rlproxy
	podman build -t rlproxy:$(VERSION) -t rlproxy:latest -f deploy/Containerfile deploy
