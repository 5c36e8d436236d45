# outboxd — build, test and run against the project's own servers.
#
#   make test    start PostgreSQL + Kafka (internal/testkit/testbed/testbed.sh), run
#                go vet and all tests with the race detector, stop both
#   make up      keep both servers running; then `eval "$$(make -s env)"` and
#                run `go test ./...` as often as you like
#   make down    stop them
#   make build   build bin/outboxd
#   make bench   outboxd beside pg_recvlogical, Debezium and the polling relay,
#                and both exactly-once (outboxd-eos, debezium-eos: KIP-618)
#                (docs/bench/), then the idempotent consumer against a plain one
#                (docs/bench/consumer/); BENCH_FLAGS adds flags, e.g. -events 100000
#   make chaos   the long fault-injection runs (1,000,000 events, every fault
#                kind many times), at-least-once then exactly-once
#                (docs/chaos-report*.json); CHAOS_FLAGS adds flags, e.g. -v or -events

SHELL := /bin/bash
GO ?= go
TESTBED := internal/testkit/testbed/testbed.sh
GOTESTFLAGS ?= -race -count=1 -timeout 30m

.PHONY: test test-go up down env build chaos bench

test:
	$(TESTBED) run -- $(MAKE) --no-print-directory test-go

# test-go runs against whatever OUTBOXD_TEST_* points at (make up, or your own).
test-go:
	$(GO) vet ./...
	set -o pipefail; $(GO) test $(GOTESTFLAGS) -json ./... | $(GO) run ./internal/testkit/testbed/testsummary

up:
	$(TESTBED) up

down:
	$(TESTBED) down

env:
	@$(TESTBED) env

build:
	$(GO) build -o bin/outboxd ./cmd/outboxd

CHAOS_FLAGS ?=
chaos: build
	$(GO) build -o bin/outboxd-chaos ./cmd/outboxd-chaos
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -json docs/chaos-report.json $(CHAOS_FLAGS)
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -exactly-once -postgres_failover 0 -json docs/chaos-report-exactly-once.json $(CHAOS_FLAGS)

BENCH_FLAGS ?=
bench: build
	$(GO) build -o bin/relay ./bench/cmd/relay
	$(GO) run ./bench/cmd/outboxd-bench -outboxd bin/outboxd -relay bin/relay -testbed $(TESTBED) $(BENCH_FLAGS)
	$(GO) run ./bench/cmd/consumer-bench -testbed $(TESTBED)
