# outboxd — build, test and run against the project's own servers.
#
#   make test    start PostgreSQL 15, 16, 17 and 18 + Kafka
#                (harness/testbed/testbed.sh), run go vet and all tests
#                with the race detector against the first version, then the core
#                integration tests (CORE_TESTS in CORE_PKGS) against each other
#                version, and the stream's tests again with raw I/O off
#                (RAW_IO_OFF_TESTS, OUTBOXD_RAW_IO=off), stop everything.
#                PG_VERSIONS=17 runs one version.
#   make up      keep both servers running; then `eval "$$(make -s env)"` and
#                run `go test ./...` as often as you like
#   make down    stop them
#   make build   build bin/outboxd
#   make image   the OCI image without a container engine, amd64 and arm64:
#                bin/outboxd-oci and bin/outboxd-image.tar (deploy/image;
#                VERSION=v1.2.3 stamps it)
#   make bench   outboxd beside pg_recvlogical, Debezium and the polling relay,
#                and both exactly-once (outboxd-eos, debezium-eos: KIP-618)
#                (docs/bench/), then the idempotent consumer against a plain one
#                (docs/bench/consumer/); BENCH_FLAGS adds flags, e.g. -events 100000
#   make bench-compression  the drain with each --compression codec, and the
#                bytes it puts in Kafka (docs/bench/compression/)
#   make bench-fleet  100 pipelines in one `outboxd run --config` beside 100
#                processes: start-up, peak RSS, idle CPU, and a steady
#                10,000 events/s beside one pipeline, then 10 pipelines
#                beside 10 Debezium connectors on one Kafka Connect worker,
#                and the floor: the same slots read by a process that does
#                nothing else (docs/bench/fleet/); about 25 minutes;
#                FLEET_FLAGS adds flags, e.g. for a trial -pipelines 10
#                -reps 2 -idle 10s -out /tmp/fleet, or -debezium '' to
#                leave Debezium out, -slot-reader '' the floor
#   make chaos   the long fault-injection runs (1,000,000 events, every fault
#                kind many times, network faults and crashes included),
#                at-least-once then exactly-once, then 300,000 events with 5
#                failovers on PostgreSQL 17 (failover slots), then 300,000
#                events against a three-broker Kafka cluster (leaders and the
#                controller killed, two of three brokers lost, a rolling
#                restart), then the fleet run: 20 pipelines (half of them
#                exactly-once) over 3 replicas of run --config against the
#                three brokers, replicas killed and stopped, walsenders, a
#                database out of reach, a poison row, a transaction
#                coordinator killed (docs/chaos-report*.json); CHAOS_FLAGS
#                adds flags to the single-pipeline runs, e.g. -v or -events,
#                CHAOS_FLEET_FLAGS to the fleet run, e.g. -v or -pipelines
#   make soak    20 minutes at a steady rate with a fault a minute: memory,
#                goroutines, open files and records in flight must stay flat
#                (docs/soak/)
#   make compare-debezium  outboxd --layout debezium beside Debezium's outbox
#                EventRouter, record by record (docs/debezium/)
#   make docs    regenerate docs/configuration.md from the flags each command
#                registers (a test fails while it is stale)

SHELL := /bin/bash
GO ?= go
TESTBED := harness/testbed/testbed.sh
GOTESTFLAGS ?= -race -count=1 -timeout 30m
# What ships outboxd, each a Go module of its own (CONTRIBUTING.md): the
# image, the alerts and the dashboard, the Helm chart.
DEPLOY_MODULES = deploy/image deploy/monitoring deploy/helm
# PostgreSQL versions make test and make up start: the first runs every
# test, the others the core integration tests (stream, process, migrate,
# status, recovery, failover, chaos-short): what depends on the server's
# version. Unit tests run once.
PG_VERSIONS ?= 15 16 17 18
empty :=
space := $(empty) $(empty)
CORE_PKGS := ./cdc ./slot ./idempotent ./cmd/outboxd ./harness/chaos
# The core tests are those in CORE_PKGS whose body calls testenv.Core(t):
# harness/testbed/corenames finds them in the source, so a new core test
# cannot be left off a hand-kept list. Recursively expanded (=), so that it
# runs only when a recipe uses it; a run that finds none stops make rather
# than pass having run no core test.
CORE_TEST_NAMES = $(shell $(GO) run ./harness/testbed/corenames $(CORE_PKGS))
core_tests_regex = $(if $(strip $1),^($(subst $(space),|,$(strip $1)))$$,$(error no core tests: `$(GO) run ./harness/testbed/corenames $(CORE_PKGS)` found none))
CORE_TESTS = $(call core_tests_regex,$(CORE_TEST_NAMES))
# The stream's and the reader's tests in ./cdc, run a second time with raw
# I/O off (OUTBOXD_RAW_IO=off, package lib/rawio): the plain reads,
# without the read pacer's low-water mark, must pass them too. The pacer's
# and rawio's own tests cover both paths in one run.
RAW_IO_OFF_TEST_NAMES := TestConcurrentWritersPublishedOnceInCommitOrder \
	TestGracefulRestartPublishesNoDuplicates \
	TestIdleSlotFollowsWAL \
	TestPermanentKafkaErrorsStopWithoutConfirming \
	TestWalsenderTerminatedReconnects \
	TestStandbyTakesOverWhenActiveStops \
	TestKafkaDownHoldsSlotAndKeepsConnection \
	TestAcknowledgedTransactionConfirmedPromptly \
	TestGracefulStop.* \
	TestQuietStreamConfirmsAnAcknowledgedTransactionPromptly \
	TestReaderLowersTheMarkWhenItStops \
	TestRenewWakeReplacesAShortDeadline
RAW_IO_OFF_TESTS := ^($(subst $(space),|,$(strip $(RAW_IO_OFF_TEST_NAMES))))$$

.PHONY: bench-tables chaos-standby bench-formats test test-go up down env build image docs chaos bench bench-compression bench-fleet compare-debezium soak chaos-epochs bench-standby bench-replay

test:
	OUTBOXD_PG_VERSIONS="$(PG_VERSIONS)" $(TESTBED) run -- $(MAKE) --no-print-directory test-go

# test-go runs against whatever OUTBOXD_TEST_* points at (make up, or your
# own): everything against OUTBOXD_TEST_DATABASE_URL, then the core tests
# against OUTBOXD_TEST_DATABASE_URL_<v> for each version after the first in
# OUTBOXD_PG_VERSIONS (both exported by the test bed).
test-go:
	$(GO) vet ./...
	@echo "== all tests, PostgreSQL $${OUTBOXD_PG_VERSION:-15}"
	set -o pipefail; $(GO) test $(GOTESTFLAGS) -json ./... | $(GO) run ./harness/testbed/testsummary
	@echo "== stream tests with raw I/O off (OUTBOXD_RAW_IO=off), PostgreSQL $${OUTBOXD_PG_VERSION:-15}"
	set -o pipefail; OUTBOXD_RAW_IO=off $(GO) test $(GOTESTFLAGS) -json -run '$(RAW_IO_OFF_TESTS)' ./cdc | $(GO) run ./harness/testbed/testsummary
	@echo "== $(DEPLOY_MODULES) (modules of their own), PostgreSQL $${OUTBOXD_PG_VERSION:-15}"
	for m in $(DEPLOY_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	set -o pipefail; (fail=0; for m in $(DEPLOY_MODULES); do (cd $$m && $(GO) test $(GOTESTFLAGS) -json ./...) || fail=1; done; exit $$fail) \
		| $(GO) run ./harness/testbed/testsummary
	set -o pipefail; versions=($${OUTBOXD_PG_VERSIONS:-$${OUTBOXD_PG_VERSION:-15}}); for v in "$${versions[@]:1}"; do \
		url=OUTBOXD_TEST_DATABASE_URL_$$v; \
		[ -n "$${!url:-}" ] || { echo "PostgreSQL $$v is not in the test bed (make up with PG_VERSIONS)"; exit 1; }; \
		echo "== core integration tests, PostgreSQL $$v"; \
		OUTBOXD_PG_VERSION=$$v OUTBOXD_TEST_DATABASE_URL=$${!url} \
			$(GO) test $(GOTESTFLAGS) -json -run '$(CORE_TESTS)' $(CORE_PKGS) | $(GO) run ./harness/testbed/testsummary || exit 1; \
	done

up:
	OUTBOXD_PG_VERSIONS="$(PG_VERSIONS)" $(TESTBED) up

down:
	$(TESTBED) down

env:
	@$(TESTBED) env

build:
	$(GO) build -o bin/outboxd ./cmd/outboxd

# The OCI image without a container engine (deploy/image): static
# outboxd binaries stamped with VERSION, one per IMAGE_ARCHES, on no base
# image, as bin/outboxd-oci (an OCI layout holding the index of every
# architecture: skopeo copy --all, crane, containerd) and
# bin/outboxd-image.tar (docker load, podman load: the image of
# IMAGE_TARBALL_ARCH, by default GOARCH when set, else this machine's).
# The image tool itself always runs on this machine.
VERSION ?= dev
IMAGE_ARCHES ?= amd64 arm64
IMAGE_TARBALL_ARCH ?= $(or $(GOARCH),$(shell env -u GOARCH $(GO) env GOARCH))
IMAGE_OUT ?= bin
image:
	rm -rf $(IMAGE_OUT)/outboxd-oci $(IMAGE_OUT)/outboxd-image.tar
	for a in $(IMAGE_ARCHES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(IMAGE_OUT)/outboxd-static-$$a ./cmd/outboxd || exit 1; \
	done
	out=$$(cd $(IMAGE_OUT) && pwd) && cd deploy/image && env -u GOOS -u GOARCH $(GO) run ./cmd/outboxd-image \
		$(foreach a,$(IMAGE_ARCHES),-binary $$out/outboxd-static-$(a)) -version $(VERSION) \
		-revision "$$(git rev-parse --short HEAD 2>/dev/null)" -oci-layout $$out/outboxd-oci \
		-tarball $$out/outboxd-image.tar -tarball-arch $(IMAGE_TARBALL_ARCH)

# The configuration reference: every command's flags, environment variables,
# defaults and meanings (outboxd help config), written only when it succeeds.
docs:
	$(GO) run ./cmd/outboxd help config > docs/configuration.md.tmp || { rm -f docs/configuration.md.tmp; exit 1; }
	mv docs/configuration.md.tmp docs/configuration.md

CHAOS_FLAGS ?=
CHAOS_FLEET_FLAGS ?=
chaos: build
	$(GO) build -o bin/outboxd-chaos ./harness/cmd/outboxd-chaos
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -json docs/chaos-report.json $(CHAOS_FLAGS)
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -exactly-once -postgres_failover 0 -json docs/chaos-report-exactly-once.json $(CHAOS_FLAGS)
	OUTBOXD_PG_VERSION=17 bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -events 300000 -postgres_failover 5 -kill9 5 -standby_takeover 2 \
		-walsender_terminate 3 -broker_restart 2 -postgres_restart 2 -sigterm_restart 2 -json docs/chaos-report-pg17.json $(CHAOS_FLAGS)
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -kafka-nodes 3 -events 300000 -kill9 3 -standby_takeover 1 -postgres_failover 0 \
		-walsender_terminate 2 -postgres_restart 1 -sigterm_restart 1 -json docs/chaos-report-cluster.json $(CHAOS_FLAGS)
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -fleet -kafka-nodes 3 -json docs/chaos-report-fleet.json $(CHAOS_FLEET_FLAGS)

# Issue 51: past the end of the producer epoch. At least 40,000 Kafka
# transactions (transaction protocol v2 bumps the epoch at each commit; it
# runs out after 32,767) on one transactional id, two events each at a rate
# outboxd follows, with a broker restart and a kill -9 of outboxd a third
# and two thirds of the way: nothing lost or repeated, and the log shows the
# new producer id (docs/chaos-report-epochs.json; about 10 minutes).
# Issue 52: outboxd decoding on a synchronous physical standby (PostgreSQL
# 17): kill -9 of outboxd, crashes of the standby and of the primary, and
# the standby's promotion, in both delivery modes.
chaos-standby: build
	$(GO) build -o bin/outboxd-chaos ./harness/cmd/outboxd-chaos
	OUTBOXD_PG_VERSION=$(STANDBY_PG_VERSION) bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -decode-on-standby -events 200000 \
		-json docs/chaos-report-standby.json $(CHAOS_FLAGS)
	OUTBOXD_PG_VERSION=$(STANDBY_PG_VERSION) bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -decode-on-standby -exactly-once -events 200000 \
		-json docs/chaos-report-standby-exactly-once.json $(CHAOS_FLAGS)

chaos-epochs: build
	$(GO) build -o bin/outboxd-chaos ./harness/cmd/outboxd-chaos
	bin/outboxd-chaos -outboxd bin/outboxd -testbed $(TESTBED) -exactly-once -events 84000 -rate 150 -transaction-max-records 2 -min-kafka-transactions 40000 \
		-kill9 1 -broker_restart 1 -sigterm_restart 0 -postgres_restart 0 -walsender_terminate 0 -standby_takeover 0 -postgres_failover 0 \
		-postgres_crash 0 -postgres_partition 0 -postgres_reset 0 -broker_stall 0 -kafka_partition 0 -json docs/chaos-report-epochs.json $(CHAOS_FLAGS)

BENCH_FLAGS ?=
bench: build
	$(GO) build -o bin/relay ./bench/cmd/relay
	$(GO) run ./bench/cmd/outboxd-bench -outboxd bin/outboxd -relay bin/relay -testbed $(TESTBED) $(BENCH_FLAGS)
	$(GO) run ./bench/cmd/consumer-bench -testbed $(TESTBED)

# --compression's effect on the drain and on the bytes in Kafka: outboxd
# (snappy, the default) beside none, gzip, lz4 and zstd (docs/bench/compression/).
bench-compression: build
	$(GO) run ./bench/cmd/outboxd-bench -outboxd bin/outboxd -testbed $(TESTBED) -systems outboxd,outboxd-none,outboxd-gzip,outboxd-lz4,outboxd-zstd \
		-rates '' -debezium '' -perf=false -out docs/bench/compression $(BENCH_FLAGS)

# Schema formats: outboxd with --value-format avro, protobuf and
# json-schema beside json, drains and steady rates interleaved, against
# the test bed's schema registry (docs/bench/formats/).
bench-formats: build
	$(GO) run ./bench/cmd/outboxd-bench -outboxd bin/outboxd -testbed $(TESTBED) -systems outboxd,outboxd-avro,outboxd-protobuf,outboxd-json-schema \
		-rates 1000,5000,10000 -debezium '' -perf=false -steady-profile=false -out docs/bench/formats $(BENCH_FLAGS)

# Issue 39: many pipelines in one process (outboxd run --config) beside a
# process each, under a steady load beside a single pipeline, and a few
# beside as many Debezium connectors on one Connect worker, and the floor
# under the load: its slots read by bench/cmd/slot-reader (docs/bench/fleet/).
FLEET_FLAGS ?=
bench-fleet: build
	$(GO) build -o bin/slot-reader ./bench/cmd/slot-reader
	$(GO) run ./bench/cmd/fleet-bench -outboxd bin/outboxd -slot-reader bin/slot-reader -testbed $(TESTBED) $(FLEET_FLAGS)

# Issue 52: outboxd with its slot on a physical standby beside on the
# primary, at steady rates, interleaved: the primary's CPU per event (all
# its processes), the standby's, outboxd's, and commit-to-Kafka latency
# (docs/bench/standby/). PostgreSQL 16+ (STANDBY_PG_VERSION).
STANDBY_PG_VERSION ?= 17
bench-standby: build
	OUTBOXD_PG_VERSION=$(STANDBY_PG_VERSION) $(GO) run ./bench/cmd/standby-bench -outboxd bin/outboxd -testbed $(TESTBED) $(STANDBY_FLAGS)

# Issue 52, "schemas, not databases": 100 outbox tables in one database
# through one slot beside 100 databases through 100 slots, at the same
# total rate (docs/bench/tables/).
bench-tables: build
	$(GO) run ./bench/cmd/tables-bench -outboxd bin/outboxd -testbed $(TESTBED) $(TABLES_FLAGS)

# Issue 53: the stream's latency beside an outboxd replay (capped with
# --replay-rate, and uncapped) against with none, interleaved
# (docs/bench/replay/).
REPLAY_FLAGS ?=
bench-replay: build
	$(GO) run ./bench/cmd/replay-bench -outboxd bin/outboxd -testbed $(TESTBED) $(REPLAY_FLAGS)

# outboxd --layout debezium beside Debezium 3.6.1's outbox EventRouter on the
# same inserts, every record compared field by field (docs/debezium/).
compare-debezium:
	$(GO) run ./bench/cmd/debezium-compare -testbed $(TESTBED)

# A steady rate for 20 minutes with a fault a minute, checking that
# outboxd's memory, goroutines, open files and records in flight stay flat
# (docs/soak/); SOAK_FLAGS adds flags, e.g. -duration 5m.
SOAK_FLAGS ?=
soak: build
	$(GO) run ./harness/cmd/outboxd-soak -outboxd bin/outboxd -testbed $(TESTBED) $(SOAK_FLAGS)
