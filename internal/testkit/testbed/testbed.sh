#!/usr/bin/env bash
# testbed.sh — the project's own PostgreSQL (wal_level=logical) and Apache
# Kafka (single-node KRaft) for tests and benchmarks. Nothing is assumed to be
# running: this script installs what is missing, starts throwaway servers on
# free loopback ports and stops them again.
#
#   testbed.sh run -- CMD...   start both, run CMD with the env exported, stop
#                              both (also when CMD fails); exits with CMD's code
#   testbed.sh up              start both and keep them running (make up)
#   testbed.sh env             print the env of the running test bed
#   testbed.sh down            stop what `up` started (make down)
#   testbed.sh fetch           only install PostgreSQL / fetch the Kafka jars
#
# Building blocks, also used by tests that need a server of their own (one
# they may stop and restart without disturbing parallel tests):
#   testbed.sh kafka-start DIR [PORT]   start (formatting on first use) a broker
#                                       whose state lives in DIR; prints its address
#   testbed.sh kafka-stop DIR           stop it (SIGTERM, then SIGKILL)
#   testbed.sh pg-start DIR [PORT]      start (initdb on first use) a cluster in DIR;
#                                       prints its database URL
#   testbed.sh pg-stop DIR [MODE]       pg_ctl stop -m MODE (default fast)
#   testbed.sh pg-standby PRIMARY_DIR DIR [PORT]
#                                       make DIR a streaming physical standby of the
#                                       cluster in PRIMARY_DIR (pg_basebackup -R) and
#                                       start it; prints its database URL
#   testbed.sh pg-promote DIR           promote the standby in DIR (pg_ctl promote)
#   testbed.sh pg-move DIR PORT         restart the cluster in DIR on PORT (a promoted
#                                       standby taking over its old primary's address)
#
# Environment:
#   OUTBOXD_TESTBED_DIR   state of `up` (default $HOME/.cache/outboxd/testbed)
#   OUTBOXD_CACHE_DIR     jar cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/outboxd)
#   KAFKA_HEAP_OPTS       broker heap (default -Xms128m -Xmx512m)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_dir=${OUTBOXD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outboxd}
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka-pom.xml")
pom_sum=$(cat "$here/kafka-pom.xml" | sha256sum | cut -c1-12)
kafka_libs="$cache_dir/kafka-$kafka_version-$pom_sum/libs"

log() { echo "testbed: $*" >&2; }
die() { echo "testbed: error: $*" >&2; exit 1; }

is_root() { [ "$(id -u)" = 0 ]; }

# as_pg runs a PostgreSQL server binary: initdb and postgres refuse to run as
# root, so under root (CI) they run as the postgres OS user.
as_pg() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

apt_install() {
	local sudo=""
	is_root || sudo="sudo"
	command -v apt-get >/dev/null || die "cannot install $*: no apt-get; install it by hand"
	log "installing $* with apt-get"
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

pg_bindir() {
	local d
	for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

ensure_postgres() {
	if ! pg_bindir >/dev/null; then
		apt_install postgresql-15 || apt_install postgresql
	fi
	pg_bindir >/dev/null || die "no PostgreSQL server binaries under /usr/lib/postgresql after install"
	if is_root && ! id postgres >/dev/null 2>&1; then
		die "running as root but there is no postgres OS user to run initdb/postgres as"
	fi
}

ensure_java() {
	command -v java >/dev/null || apt_install openjdk-17-jre-headless
	command -v mvn >/dev/null || apt_install maven
}

ensure_kafka_jars() {
	if [ -f "$kafka_libs/.complete" ]; then
		return 0
	fi
	ensure_java
	log "fetching Apache Kafka $kafka_version jars with Maven into $kafka_libs"
	rm -rf "$kafka_libs"
	mkdir -p "$kafka_libs"
	mvn -q -B -Dstyle.color=never -f "$here/kafka-pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$kafka_libs" >&2 ||
		die "fetching Kafka jars with Maven failed (see above)"
	ls "$kafka_libs"/kafka_2.13-*.jar >/dev/null 2>&1 || die "Maven ran but no kafka_2.13 jar is in $kafka_libs"
	touch "$kafka_libs/.complete"
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# kafka_cmd sets the array kafka_cmd to a java command line with the cached jars.
kafka_cmd() {
	# shellcheck disable=SC2206
	kafka_cmd=(java ${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-Djava.awt.headless=true -Dlog4j2.configurationFile="$here/log4j2.properties"
		-cp "$kafka_libs/*" "$@")
}

# wait_kafka ADDR: wait until the broker answers a metadata request.
wait_kafka() {
	local addr=$1 dir=$2 i
	if [ ! -x "$cache_dir/bin/kafkaping" ]; then
		(cd "$here/../../.." && go build -o "$cache_dir/bin/kafkaping" ./internal/testkit/testbed/kafkaping) ||
			die "building the Kafka readiness probe failed"
	fi
	for i in $(seq 1 120); do
		if "$cache_dir/bin/kafkaping" "$addr" >/dev/null 2>&1; then
			return 0
		fi
		if ! kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
			tail -n 40 "$dir/kafka.log" >&2 || true
			die "Kafka broker in $dir exited during start-up"
		fi
		sleep 1
	done
	tail -n 40 "$dir/kafka.log" >&2 || true
	die "Kafka broker at $addr did not answer a metadata request within 120 s"
}

kafka_start() {
	local dir=$1 port=${2:-}
	ensure_kafka_jars
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	if [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
		cat "$dir/kafka.addr"
		return 0
	fi
	if [ ! -f "$dir/server.properties" ]; then
		[ -n "$port" ] || port=$(free_port)
		local cport
		cport=$(free_port)
		cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=3
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
		echo "127.0.0.1:$port" >"$dir/kafka.addr"
		# Any base64url 16-byte id will do for a throwaway cluster, except
		# one starting with "-": kafka-storage then takes it for an option
		# ("argument --cluster-id/-t: expected one argument"), which failed
		# about one Kafka start in 64 (seen as a flaky chaos test).
		local cluster_id
		cluster_id=$(python3 -c '
import base64, os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break
')
		kafka_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties"
		"${kafka_cmd[@]}" >"$dir/format.log" 2>&1 ||
			{ cat "$dir/format.log" >&2; die "formatting the KRaft log directory failed"; }
	fi
	local addr
	addr=$(cat "$dir/kafka.addr")
	kafka_cmd kafka.Kafka "$dir/server.properties"
	# Its own session, so that a Ctrl-C in the terminal that ran `up` does not stop it.
	setsid "${kafka_cmd[@]}" >>"$dir/kafka.log" 2>&1 </dev/null &
	echo $! >"$dir/kafka.pid"
	wait_kafka "$addr" "$dir"
	log "Kafka $kafka_version up at $addr (state in $dir)"
	echo "$addr"
}

kafka_stop() {
	local dir=$1 pid i
	[ -f "$dir/kafka.pid" ] || return 0
	pid=$(cat "$dir/kafka.pid")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/kafka.pid"
}

pg_start() {
	local dir=$1 port=${2:-} bin
	ensure_postgres
	bin=$(pg_bindir)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	if [ ! -f "$dir/pg.url" ]; then
		[ -n "$port" ] || port=$(free_port)
		chmod 755 "$dir"
		mkdir -p "$dir/data"
		is_root && chown postgres: "$dir" "$dir/data"
		as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; die "initdb failed"; }
		# Appended settings win over the defaults initdb wrote.
		as_pg tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
wal_level = logical
max_replication_slots = 40
max_wal_senders = 40
max_connections = 300
fsync = off
full_page_writes = off
wal_sender_timeout = 60s
# Tests compare each record's timestamp with pg_xact_commit_timestamp().
track_commit_timestamp = on
log_min_messages = warning
EOF
		echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$dir/pg.url"
	fi
	if ! as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
		as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/data/server.log" -w -t 60 start >/dev/null ||
			{ tail -n 40 "$dir/data/server.log" >&2 || true; die "starting PostgreSQL failed"; }
	fi
	log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') up at $(cat "$dir/pg.url") (state in $dir)"
	cat "$dir/pg.url"
}

pg_stop() {
	local dir=$1 mode=${2:-fast} bin
	bin=$(pg_bindir) || return 0
	[ -d "$dir/data" ] || return 0
	# The real path, as pg_start uses: the postgres user cannot traverse a
	# root-only directory holding a symlink to it (run's state directory),
	# so pg_ctl status failed there and the server was left running.
	dir=$(cd "$dir" && pwd -P)
	if as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
		as_pg "$bin/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null || true
	fi
}

pg_standby() {
	local primary=$1 dir=$2 port=${3:-} bin purl pport
	bin=$(pg_bindir)
	primary=$(cd "$primary" && pwd -P)
	purl=$(cat "$primary/pg.url")
	pport=$(echo "$purl" | sed -n 's|.*@127.0.0.1:\([0-9]*\)/.*|\1|p')
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	[ -n "$port" ] || port=$(free_port)
	chmod 755 "$dir"
	is_root && chown postgres: "$dir"
	# -R writes standby.signal and primary_conninfo; pg_replslot is not
	# copied, so the standby has no replication slot (as in production).
	as_pg "$bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/data" -R -X stream --checkpoint=fast --no-sync >"$dir/basebackup.log" 2>&1 ||
		{ cat "$dir/basebackup.log" >&2; die "pg_basebackup failed"; }
	as_pg tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
port = $port
unix_socket_directories = '$dir'
EOF
	echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$dir/pg.url"
	as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/data/server.log" -w -t 60 start >/dev/null ||
		{ tail -n 40 "$dir/data/server.log" >&2 || true; die "starting the standby failed"; }
	log "PostgreSQL standby of $purl up at $(cat "$dir/pg.url") (state in $dir)"
	cat "$dir/pg.url"
}

pg_promote() {
	local dir=$1 bin
	bin=$(pg_bindir)
	dir=$(cd "$dir" && pwd -P)
	as_pg "$bin/pg_ctl" -D "$dir/data" -w -t 60 promote >/dev/null
}

pg_move() {
	local dir=$1 port=$2
	pg_stop "$dir" fast
	dir=$(cd "$dir" && pwd -P)
	echo "port = $port" | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
	echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$dir/pg.url"
	pg_start "$dir"
}

write_env() {
	local dir=$1
	{
		echo "export OUTBOXD_TEST_DATABASE_URL='$(cat "$dir/pg/pg.url")'"
		echo "export OUTBOXD_TEST_BROKERS='$(cat "$dir/kafka/kafka.addr")'"
		echo "export OUTBOXD_TESTBED='$here/testbed.sh'"
	} >"$dir/env"
}

up() {
	local dir=$1
	mkdir -p "$dir"
	ensure_postgres
	ensure_kafka_jars
	# PostgreSQL's data directory must be reachable by the postgres OS user,
	# which a directory under /root is not: keep it under /tmp.
	if [ ! -e "$dir/pg" ]; then
		ln -s "$(mktemp -d /tmp/outboxd-pg.XXXXXX)" "$dir/pg"
	fi
	pg_start "$dir/pg" >/dev/null
	kafka_start "$dir/kafka" >/dev/null
	write_env "$dir"
}

down() {
	local dir=$1
	[ -d "$dir" ] || return 0
	kafka_stop "$dir/kafka"
	if [ -e "$dir/pg" ]; then
		pg_stop "$dir/pg" immediate
		rm -rf "$(readlink -f "$dir/pg")"
	fi
	rm -rf "$dir"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
state=${OUTBOXD_TESTBED_DIR:-$HOME/.cache/outboxd/testbed}
case "$cmd" in
fetch)
	ensure_postgres
	ensure_kafka_jars
	;;
up)
	up "$state"
	log "running; stop with: $0 down"
	cat "$state/env"
	;;
env)
	[ -f "$state/env" ] || die "the test bed is not up (run: $0 up)"
	cat "$state/env"
	;;
down)
	down "$state"
	;;
run)
	[ "${1:-}" = "--" ] && shift
	[ $# -gt 0 ] || die "usage: $0 run -- CMD..."
	run_dir=$(mktemp -d "${TMPDIR:-/tmp}/outboxd-testbed.XXXXXX")
	trap 'down "$run_dir"' EXIT
	trap 'exit 130' INT TERM
	start=$(date +%s)
	up "$run_dir"
	log "servers up in $(($(date +%s) - start)) s"
	# shellcheck disable=SC1091
	source "$run_dir/env"
	set +e
	"$@"
	rc=$?
	set -e
	exit $rc
	;;
kafka-start) kafka_start "$@" ;;
kafka-stop) kafka_stop "$@" ;;
pg-start) pg_start "$@" ;;
pg-stop) pg_stop "$@" ;;
pg-standby) pg_standby "$@" ;;
pg-promote) pg_promote "$@" ;;
pg-move) pg_move "$@" ;;
*)
	sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
	[ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = -h ] || exit 2
	;;
esac
