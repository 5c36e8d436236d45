#!/usr/bin/env bash
# run.sh — Debezium (PostgreSQL connector + Outbox Event Router on Kafka
# Connect standalone) as a benchmark peer of outboxd.
#
#   run.sh fetch
#       fetch the jars with Maven (pom.xml) into the cache; no-op when complete
#   run.sh start WORKDIR PGHOST PGPORT PGDATABASE KAFKA_BOOTSTRAP TOPIC_PREFIX
#       write WORKDIR/connect-standalone.properties and
#       WORKDIR/outbox-connector.properties from the templates here, start
#       Connect in the background (log WORKDIR/connect.log, pid
#       WORKDIR/connect.pid) and print its pid. Events go to the topic
#       TOPIC_PREFIX.<aggregatetype>. The database needs schema.sql applied.
#   run.sh start-many WORKDIR PGHOST PGPORT KAFKA_BOOTSTRAP DATABASE:SLOT:TOPIC_PREFIX...
#       as start, with one connector a DATABASE:SLOT:TOPIC_PREFIX on the
#       one standalone worker (connector outbox-debezium-DATABASE, its
#       slot, its prefix), as a site runs many outboxes on one Connect
#       worker; DBZ_SLOT_NAME and DBZ_EXACTLY_ONCE do not apply
#   run.sh status WORKDIR
#       print the connectors' status from the REST API (exit 1 unless every
#       connector and task is RUNNING)
#   run.sh wait WORKDIR [SECONDS]
#       wait until every connector task is RUNNING (default 120 s)
#   run.sh stop WORKDIR
#       stop Connect (SIGTERM: it flushes offsets and confirms the LSN to
#       PostgreSQL; SIGKILL after 30 s)
#
# Environment:
#   OUTBOXD_CACHE_DIR   jar cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/outboxd)
#   PGUSER, PGPASSWORD  database user (default postgres) and password (default none)
#   DBZ_SLOT_NAME       replication slot (default debezium); created by the
#                       connector if missing, else used from its confirmed LSN
#   CONNECT_HEAP_OPTS   JVM heap (default -Xms1g -Xmx1g: sized once, not resized
#                       during a drain)
#   DBZ_EXACTLY_ONCE    1: a distributed worker with exactly-once source
#                       support (KIP-618) instead of standalone, the connector
#                       submitted through the REST API with
#                       exactly.once.support=required and
#                       transaction.boundary=poll
#   DBZ_CONNECTOR_EXTRA a properties file appended to the connector's (its
#                       keys override the template's), e.g. other Outbox
#                       Event Router options for the Debezium comparison
#   DBZ_PROFILE         drain (default: poll.interval.ms=50, producer linger
#                       20 ms, for throughput) or latency (poll.interval.ms=5,
#                       linger 0, as outboxd: the queue is polled every 5 ms
#                       instead of waiting up to 50 ms for a batch to fill)
#   DBZ_FOREGROUND      1: start and start-many exec Connect in the foreground
#                       (the caller's child is then the JVM itself, logging
#                       to WORKDIR/connect.log) instead of starting it in the
#                       background and printing its pid; not with
#                       DBZ_EXACTLY_ONCE
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_dir=${OUTBOXD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outboxd}
dbz_version=$(sed -n 's:.*<debezium.version>\(.*\)</debezium.version>.*:\1:p' "$here/pom.xml")
pom_sum=$(sha256sum <"$here/pom.xml" | cut -c1-12)
jars="$cache_dir/debezium-$dbz_version-$pom_sum"
worker_libs="$jars/worker"
plugin_path="$jars/plugins"
connector_libs="$plugin_path/debezium-connector-postgres"

log() { echo "debezium: $*" >&2; }
die() { echo "debezium: error: $*" >&2; exit 1; }

fetch() {
	[ -f "$jars/.complete" ] && return 0
	command -v java >/dev/null || die "java is not installed"
	command -v mvn >/dev/null || die "mvn is not installed"
	log "fetching Kafka Connect and Debezium $dbz_version jars with Maven into $jars"
	rm -rf "$jars"
	mkdir -p "$worker_libs" "$connector_libs"
	local part dir
	for part in worker plugin; do
		dir=$worker_libs
		[ "$part" = plugin ] && dir=$connector_libs
		mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
			-Dpart="$part" -DincludeScope=runtime -DoutputDirectory="$dir" >&2 ||
			die "fetching the $part jars with Maven failed (see above)"
	done
	ls "$worker_libs"/connect-runtime-*.jar >/dev/null 2>&1 || die "no connect-runtime jar in $worker_libs"
	ls "$connector_libs"/debezium-connector-postgres-*.jar >/dev/null 2>&1 || die "no connector jar in $connector_libs"
	ls "$connector_libs"/debezium-connect-plugins-*.jar >/dev/null 2>&1 || die "no EventRouter jar in $connector_libs"
	touch "$jars/.complete"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# sed_escape VALUE: VALUE made safe as the replacement of s|...|...|.
sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }

# render TEMPLATE OUT NAME=VALUE...: replace each @NAME@ in TEMPLATE.
render() {
	local tmpl=$1 out=$2 kv
	shift 2
	local args=()
	for kv in "$@"; do
		args+=(-e "s|@${kv%%=*}@|$(sed_escape "${kv#*=}")|g")
	done
	sed "${args[@]}" "$tmpl" >"$out.tmp"
	if grep -n '^[^#]*@[A-Z_]*@' "$out.tmp" >&2; then
		die "unreplaced placeholder in $out (above)"
	fi
	mv "$out.tmp" "$out"
}

running() { [ -f "$1/connect.pid" ] && kill -0 "$(cat "$1/connect.pid")" 2>/dev/null; }

# profile_settings: poll_ms and linger_ms of DBZ_PROFILE.
profile_settings() {
	case ${DBZ_PROFILE:-drain} in
	drain) poll_ms=50 linger_ms=20 ;;
	latency) poll_ms=5 linger_ms=0 ;;
	*) die "DBZ_PROFILE must be drain or latency, not ${DBZ_PROFILE}" ;;
	esac
}

# connector OUT NAME PGHOST PGPORT PGDATABASE SLOT TOPIC_PREFIX: write a
# connector's properties to OUT from the template, with DBZ_CONNECTOR_EXTRA
# appended.
connector() {
	local out=$1 name=$2 pghost=$3 pgport=$4 pgdb=$5 slot=$6 prefix=$7
	render "$here/outbox-connector.properties.in" "$out" "CONNECTOR_NAME=$name" \
		"PGHOST=$pghost" "PGPORT=$pgport" "PGDATABASE=$pgdb" "PGUSER=${PGUSER:-postgres}" \
		"PGPASSWORD=${PGPASSWORD:-}" "TOPIC_PREFIX=$prefix" "SLOT_NAME=$slot" "POLL_INTERVAL_MS=$poll_ms"
	if [ -n "${DBZ_CONNECTOR_EXTRA:-}" ]; then
		# Later keys win in a properties file: these override the template's.
		{ echo "# from DBZ_CONNECTOR_EXTRA ($DBZ_CONNECTOR_EXTRA)"; cat "$DBZ_CONNECTOR_EXTRA"; } >>"$out"
	fi
}

# prepare DIR: fetch, make DIR, refuse a DIR whose Connect runs, and pick
# the REST port (DIR/connect.rest). Sets dir (absolute) and port.
prepare() {
	fetch
	mkdir -p "$1"
	dir=$(cd "$1" && pwd -P)
	running "$dir" && die "Connect is already running in $dir (pid $(cat "$dir/connect.pid"))"
	if [ "${DBZ_FOREGROUND:-}" = 1 ] && [ "${DBZ_EXACTLY_ONCE:-}" = 1 ]; then
		die "DBZ_FOREGROUND=1 and DBZ_EXACTLY_ONCE=1 cannot go together: the connector is submitted after the worker started"
	fi
	port=$(free_port)
	echo "$port" >"$dir/connect.rest"
	profile_settings
}

start() {
	[ $# -eq 6 ] || die "usage: $0 start WORKDIR PGHOST PGPORT PGDATABASE KAFKA_BOOTSTRAP TOPIC_PREFIX"
	local dir port poll_ms linger_ms pghost=$2 pgport=$3 pgdb=$4 brokers=$5 prefix=$6
	prepare "$1"
	connector "$dir/outbox-connector.properties" outbox-debezium "$pghost" "$pgport" "$pgdb" "${DBZ_SLOT_NAME:-debezium}" "$prefix"
	if [ "${DBZ_EXACTLY_ONCE:-}" = 1 ]; then
		render "$here/connect-distributed.properties.in" "$dir/connect-distributed.properties" \
			"KAFKA_BOOTSTRAP=$brokers" "PLUGIN_PATH=$plugin_path" "REST_PORT=$port" "LINGER_MS=$linger_ms" \
			"GROUP=dbz-$(basename "$dir")"
		launch "$dir" org.apache.kafka.connect.cli.ConnectDistributed "$dir/connect-distributed.properties"
		submit "$dir" "$port"
		cat "$dir/connect.pid"
		return
	fi
	standalone "$dir" "$brokers" "$dir/outbox-connector.properties"
}

start_many() {
	[ $# -ge 5 ] || die "usage: $0 start-many WORKDIR PGHOST PGPORT KAFKA_BOOTSTRAP DATABASE:SLOT:TOPIC_PREFIX..."
	[ "${DBZ_EXACTLY_ONCE:-}" = 1 ] && die "start-many runs standalone; DBZ_EXACTLY_ONCE=1 is for start"
	local dir port poll_ms linger_ms pghost=$2 pgport=$3 brokers=$4 spec db slot prefix
	prepare "$1"
	shift 4
	local files=()
	for spec in "$@"; do
		IFS=: read -r db slot prefix <<<"$spec"
		[ -n "$db" ] && [ -n "$slot" ] && [ -n "$prefix" ] || die "$spec: want DATABASE:SLOT:TOPIC_PREFIX"
		connector "$dir/connector-$db.properties" "outbox-debezium-$db" "$pghost" "$pgport" "$db" "$slot" "$prefix"
		files+=("$dir/connector-$db.properties")
	done
	standalone "$dir" "$brokers" "${files[@]}"
}

# standalone DIR BROKERS CONNECTOR_FILE...: a standalone worker running
# the connectors.
standalone() {
	local dir=$1 brokers=$2
	shift 2
	render "$here/connect-standalone.properties.in" "$dir/connect-standalone.properties" \
		"KAFKA_BOOTSTRAP=$brokers" "PLUGIN_PATH=$plugin_path" "REST_PORT=$port" "WORKDIR=$dir" "LINGER_MS=$linger_ms"
	launch "$dir" org.apache.kafka.connect.cli.ConnectStandalone "$dir/connect-standalone.properties" "$@"
	echo "$(cat "$dir/connect.pid")"
}

# launch DIR MAIN ARGS...: start the JVM, in the background in its own
# session (so that a Ctrl-C in the caller's terminal does not reach it), or
# with DBZ_FOREGROUND=1 in place of this script.
launch() {
	local dir=$1 main=$2
	shift 2
	# JVM flags as Kafka's own scripts use (kafka-run-class.sh).
	# shellcheck disable=SC2206
	local cmd=(java ${CONNECT_HEAP_OPTS:--Xms1g -Xmx1g} -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
		-Dlog4j2.configurationFile="$here/log4j2.properties"
		-cp "$worker_libs/*" "$main" "$@")
	if [ "${DBZ_FOREGROUND:-}" = 1 ]; then
		echo $$ >"$dir/connect.pid"
		log "Kafka Connect starting in the foreground (pid $$, log $dir/connect.log, REST http://127.0.0.1:$port)"
		exec "${cmd[@]}" >>"$dir/connect.log" 2>&1 </dev/null
	fi
	setsid "${cmd[@]}" >>"$dir/connect.log" 2>&1 </dev/null &
	echo $! >"$dir/connect.pid"
	log "Kafka Connect started (pid $!, log $dir/connect.log, REST http://127.0.0.1:$port)"
}

# submit DIR PORT: wait for the distributed worker's REST API and submit the
# connector of DIR/outbox-connector.properties with exactly-once support
# required, one transaction per poll.
submit() {
	local dir=$1 port=$2 i
	for ((i = 0; i < 600; i++)); do
		running "$dir" || { tail -n 40 "$dir/connect.log" >&2 || true; die "Connect in $dir has exited"; }
		curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
		sleep 0.2
	done
	python3 - "$dir/outbox-connector.properties" >"$dir/connector.json" <<'PY'
import json, sys
props = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line or line.startswith("#"):
        continue
    k, v = line.split("=", 1)
    props[k] = v.replace("\\\\", "\\")  # properties escaping: \\ is one backslash
name = props.pop("name")
props["exactly.once.support"] = "required"
props["transaction.boundary"] = "poll"
print(json.dumps({"name": name, "config": props}))
PY
	curl -fsS -X POST -H 'Content-Type: application/json' --data "@$dir/connector.json" \
		"http://127.0.0.1:$port/connectors" >/dev/null || die "submitting the connector to Connect failed (see $dir/connect.log)"
	log "connector submitted with exactly.once.support=required"
}

# connector_status DIR: every connector's status JSON, by name, empty if
# not reachable.
connector_status() {
	local port url
	port=$(cat "$1/connect.rest" 2>/dev/null) || return 0
	url="http://127.0.0.1:$port/connectors?expand=status"
	curl -fsS "$url" 2>/dev/null ||
		python3 -c 'import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
			"$url" 2>/dev/null || true
}

# task_running: whether the status JSON on stdin has connectors, each
# RUNNING with every task RUNNING.
task_running() {
	python3 -c '
import json, sys
cs = json.load(sys.stdin)
ok = bool(cs) and all(
    c["status"]["connector"]["state"] == "RUNNING" and c["status"]["tasks"]
    and all(t["state"] == "RUNNING" for t in c["status"]["tasks"])
    for c in cs.values())
sys.exit(0 if ok else 1)' 2>/dev/null
}

status() {
	local dir=${1:?usage: $0 status WORKDIR} s
	running "$dir" || die "Connect is not running in $dir"
	s=$(connector_status "$dir")
	[ -n "$s" ] || die "Connect's REST API does not answer (yet)"
	echo "$s"
	task_running <<<"$s"
}

wait_running() {
	local dir=${1:?usage: $0 wait WORKDIR [SECONDS]} limit=${2:-120} i s
	for ((i = 0; i < limit * 5; i++)); do
		running "$dir" || { tail -n 40 "$dir/connect.log" >&2 || true; die "Connect in $dir has exited"; }
		s=$(connector_status "$dir")
		if [ -n "$s" ] && task_running <<<"$s"; then
			return 0
		fi
		if [ -n "$s" ] && grep -q '"FAILED"' <<<"$s"; then
			echo "$s" >&2
			die "the connector failed (see $dir/connect.log)"
		fi
		sleep 0.2
	done
	die "the connector task was not RUNNING within $limit s (see $dir/connect.log)"
}

stop() {
	local dir=${1:?usage: $0 stop WORKDIR} pid i
	[ -f "$dir/connect.pid" ] || return 0
	pid=$(cat "$dir/connect.pid")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 150; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "Connect (pid $pid) did not stop within 30 s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$dir/connect.pid"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
fetch) fetch ;;
start) start "$@" ;;
start-many) start_many "$@" ;;
status) status "$@" ;;
wait) wait_running "$@" ;;
stop) stop "$@" ;;
help | -h | "")
	sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'
	;;
*)
	sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
