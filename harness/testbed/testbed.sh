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
#   testbed.sh state-dir       print where `up` keeps its state
#   testbed.sh fetch           only install PostgreSQL / fetch the Kafka jars
#
# Building blocks, also used by tests that need a server of their own (one
# they may stop and restart without disturbing parallel tests):
#   testbed.sh kafka-start DIR [PORT [ADVERTISED]]
#                                       start (formatting on first use) a broker
#                                       whose state lives in DIR; prints its address
#                                       (ADVERTISED host:port, when given: the address
#                                       clients are told, e.g. a fault-injecting proxy's)
#   testbed.sh kafka-cluster-start DIR N
#                                       start (formatting on first use) N brokers, each
#                                       also a KRaft controller, in DIR/node1..N, topics
#                                       replicated 3 times (min.insync.replicas 2);
#                                       prints the bootstrap list. kafka-start DIR/nodeI
#                                       and kafka-stop DIR/nodeI start and stop one
#   testbed.sh kafka-stop DIR           stop it (SIGTERM, then SIGKILL)
#   testbed.sh registry-start DIR [PORT]
#                                       start Apicurio Registry (in-memory storage, from
#                                       its distribution on Maven Central; needs Java 21+)
#                                       with its state in DIR; prints the base URL of its
#                                       Confluent-compatible API
#   testbed.sh registry-stop DIR        stop it
#   testbed.sh schemacheck              print the python of a virtual environment
#                                       with harness/schemacheck's requirements (the
#                                       independent Avro, Protobuf and JSON Schema
#                                       decoders), made on first use
#   testbed.sh pg-start DIR [PORT]      start (initdb on first use) a cluster in DIR;
#                                       prints its database URL
#   testbed.sh pg-stop DIR [MODE]       pg_ctl stop -m MODE (default fast)
#   testbed.sh pg-standby PRIMARY_DIR DIR [PORT]
#                                       make DIR a streaming physical standby of the
#                                       cluster in PRIMARY_DIR (a base backup without
#                                       slots, streaming through a physical slot, with
#                                       hot_standby_feedback and, on 17+,
#                                       sync_replication_slots) and start it; prints
#                                       its database URL
#   testbed.sh pg-promote DIR           promote the standby in DIR (pg_ctl promote)
#   testbed.sh pg-move DIR PORT         restart the cluster in DIR on PORT (a promoted
#                                       standby taking over its old primary's address)
#
# PostgreSQL versions: 15 is Debian's package (installed when missing; the
# zonky 15 binaries where Debian has no postgresql-15); 16, 17 and 18 are
# the zonky embedded-postgres server binaries from Maven Central,
# fetched once and unpacked into the cache (a version Debian has installed
# under /usr/lib/postgresql is used instead). `up` and `run` start one cluster
# per version in OUTBOXD_PG_VERSIONS; the first is OUTBOXD_TEST_DATABASE_URL,
# each is also OUTBOXD_TEST_DATABASE_URL_<version>. pg-start creates clusters
# of OUTBOXD_PG_VERSION; the other pg-* commands use the binaries of the
# cluster's own version.
#
# Environment:
#   OUTBOXD_PG_VERSIONS   versions `up` and `run` start (default: 15)
#   OUTBOXD_PG_VERSION    version pg-start creates (default: 15)
#   OUTBOXD_TESTBED_DIR   state of `up` (default $HOME/.cache/outboxd/testbed-<hash of
#                         this checkout's path>: one per clone)
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

# zonky_versions: the zonky embedded-postgres-binaries release per major version.
# 15's is the fallback where Debian has no postgresql-15 package.
declare -A zonky_versions=([15]=15.14.0 [16]=16.10.0 [17]=17.6.0 [18]=18.1.0)

# pg_cache: where unpacked server binaries live. The postgres OS user runs
# them under root, and cannot traverse /root: keep them outside it there.
pg_cache() {
	if is_root; then
		echo /var/cache/outboxd/postgres
	else
		echo "$cache_dir/postgres"
	fi
}

# pg_bindir [VERSION]: the server binaries of a major version (default
# OUTBOXD_PG_VERSION, else 15), without installing anything.
pg_bindir() {
	local v=${1:-${OUTBOXD_PG_VERSION:-15}} d
	for d in "/usr/lib/postgresql/$v/bin" "$(pg_cache)/$v/bin"; do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# cluster_bindir DIR: the binaries of the version the cluster in DIR was made with.
cluster_bindir() {
	local dir=$1
	[ -f "$dir/data/PG_VERSION" ] || return 1
	pg_bindir "$(cat "$dir/data/PG_VERSION")"
}

# fetch_zonky VERSION: unpack the zonky server binaries of a major version
# into the cache (Maven keeps the jar in its own repository: a second run
# downloads nothing).
fetch_zonky() {
	local v=$1 full arch tmp dest unpack
	full=${zonky_versions[$v]:-}
	[ -n "$full" ] || die "no PostgreSQL $v binaries known: choose from ${!zonky_versions[*]}"
	case "$(uname -m)" in
	x86_64) arch=amd64 ;;
	aarch64) arch=arm64v8 ;;
	*) die "no zonky PostgreSQL binaries for $(uname -m)" ;;
	esac
	ensure_java
	dest="$(pg_cache)/$v"
	tmp=$(mktemp -d)
	log "fetching PostgreSQL $full server binaries (zonky, linux-$arch) with Maven"
	mvn -q -B -Dstyle.color=never dependency:copy \
		-Dartifact="io.zonky.test.postgres:embedded-postgres-binaries-linux-$arch:$full" \
		-DoutputDirectory="$tmp" >&2 || { rm -rf "$tmp"; die "fetching PostgreSQL $full binaries with Maven failed (see above)"; }
	# Unpacked beside dest and renamed into place: a dest that exists is
	# complete, also for a parallel pg-start.
	mkdir -p "$(pg_cache)"
	unpack=$(mktemp -d "$(pg_cache)/unpacking-$v.XXXXXX")
	python3 - "$tmp"/*.jar "$unpack" <<'PY' || { rm -rf "$tmp" "$unpack"; die "unpacking PostgreSQL $full binaries failed"; }
import io, sys, tarfile, zipfile
jar, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(jar) as z:
    name = next(n for n in z.namelist() if n.endswith(".txz"))
    with tarfile.open(fileobj=io.BytesIO(z.read(name)), mode="r:xz") as t:
        t.extractall(dest)
PY
	rm -rf "$tmp"
	[ -x "$unpack/bin/initdb" ] || { rm -rf "$unpack"; die "the PostgreSQL $full jar held no bin/initdb"; }
	chmod -R a+rX "$unpack"
	chmod a+rx "$(pg_cache)"
	if ! mv -T "$unpack" "$dest" 2>/dev/null; then
		rm -rf "$unpack" # another process put it there first
	fi
	pg_bindir "$v" >/dev/null || die "no PostgreSQL $v binaries in $dest after unpacking"
}

# ensure_postgres [VERSION]: install or fetch the server binaries of a version.
ensure_postgres() {
	local v=${1:-${OUTBOXD_PG_VERSION:-15}}
	if ! pg_bindir "$v" >/dev/null; then
		if [ "$v" = 15 ] && command -v apt-get >/dev/null && apt-cache show postgresql-15 >/dev/null 2>&1; then
			apt_install postgresql-15
		else
			fetch_zonky "$v"
		fi
	fi
	pg_bindir "$v" >/dev/null || die "no PostgreSQL $v server binaries after install"
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

# Apicurio Registry, the schema registry the registry tests run against:
# its Quarkus distribution (classifier all) from Maven Central. 3.3 needs
# Java 21 or newer; older releases lack the parent POM on Central.
apicurio_version=3.3.3
apicurio_dir="$cache_dir/apicurio-registry-$apicurio_version"

ensure_apicurio() {
	[ -f "$apicurio_dir/.complete" ] && return 0
	ensure_java
	log "fetching Apicurio Registry $apicurio_version with Maven into $apicurio_dir"
	rm -rf "$apicurio_dir"
	mkdir -p "$apicurio_dir"
	mvn -q -B -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
		-Dartifact="io.apicurio:apicurio-registry-app:$apicurio_version:tar.gz:all" -DoutputDirectory="$apicurio_dir" >&2 ||
		die "fetching Apicurio Registry with Maven failed (see above)"
	tar xzf "$apicurio_dir/apicurio-registry-app-$apicurio_version-all.tar.gz" -C "$apicurio_dir"
	rm -f "$apicurio_dir/apicurio-registry-app-$apicurio_version-all.tar.gz"
	[ -f "$apicurio_dir/quarkus-run.jar" ] || die "no quarkus-run.jar in Apicurio Registry's distribution"
	touch "$apicurio_dir/.complete"
}

# java21 prints a java of version 21 or newer, installing one when none is.
java21() {
	local j major
	for j in ${JAVA21:-} /usr/lib/jvm/*/bin/java java; do
		[ -x "$j" ] || j=$(command -v "$j" 2>/dev/null) || continue
		major=$("$j" -XshowSettings:properties -version 2>&1 | sed -n 's/.*java.specification.version = \([0-9]*\).*/\1/p')
		if [ "${major:-0}" -ge 21 ]; then
			echo "$j"
			return 0
		fi
	done
	apt_install openjdk-21-jre-headless
	echo /usr/lib/jvm/java-21-openjdk-amd64/bin/java
}

registry_start() {
	local dir=$1 port=${2:-} java i url
	ensure_apicurio
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	if [ -f "$dir/registry.pid" ] && kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null; then
		cat "$dir/registry.url"
		return 0
	fi
	[ -n "$port" ] || port=$(free_port)
	java=$(java21)
	url="http://127.0.0.1:$port/apis/ccompat/v7"
	# In-memory storage (H2), loopback only; its management interface
	# (health, metrics) on a free port of its own.
	(cd "$dir" && exec "$java" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
		-Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
		-Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$(free_port)" \
		-jar "$apicurio_dir/quarkus-run.jar" >"$dir/registry.log" 2>&1) &
	echo $! >"$dir/registry.pid"
	for i in $(seq 1 240); do
		if python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1]+"/subjects", timeout=2)' "$url" 2>/dev/null; then
			echo "$url" >"$dir/registry.url"
			echo "$url"
			return 0
		fi
		if ! kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null; then
			tail -n 40 "$dir/registry.log" >&2 || true
			die "Apicurio Registry in $dir exited during start-up"
		fi
		sleep 0.5
	done
	tail -n 40 "$dir/registry.log" >&2 || true
	die "Apicurio Registry at $url did not answer within 120 s"
}

registry_stop() { stop_pidfile "$1/registry.pid"; }

schemacheck() {
	local req="$here/../schemacheck/requirements.txt" venv
	venv="$cache_dir/schemacheck-$(sha256sum <"$req" | cut -c1-12)"
	if [ ! -f "$venv/.complete" ]; then
		log "installing the independent schema decoders into $venv"
		rm -rf "$venv"
		python3 -m venv "$venv" >&2 || die "python3 -m venv failed"
		"$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2 || die "pip install -r $req failed"
		touch "$venv/.complete"
	fi
	echo "$venv/bin/python"
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

# build_tool NAME: build a Go helper of the test bed into the cache, once per
# source version.
build_tool() {
	local name=$1 out sum
	sum=$(cat "$here/$name"/*.go | sha256sum | cut -c1-12)
	out="$cache_dir/bin/$name-$sum"
	if [ ! -x "$out" ]; then
		(cd "$here/../.." && go build -o "$out" "./harness/testbed/$name") ||
			die "building the test bed's $name failed"
	fi
	echo "$out"
}

# wait_kafka ADDR: wait until the broker answers a metadata request.
wait_kafka() {
	local addr=$1 dir=$2 i ping
	ping=$(build_tool kafkaping)
	for i in $(seq 1 120); do
		if "$ping" "$addr" >/dev/null 2>&1; then
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
	local dir=$1 port=${2:-} advertised=${3:-}
	ensure_kafka_jars
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	if [ -f "$dir/kafka.pid" ] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
		cat "$dir/kafka.addr"
		return 0
	fi
	if [ ! -f "$dir/server.properties" ]; then
		[ -n "$port" ] || port=$(free_port)
		[ -n "$advertised" ] || advertised=127.0.0.1:$port
		local cport
		cport=$(free_port)
		cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://$advertised
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
		echo "$advertised" >"$dir/kafka.addr"
	fi
	# Formatted once; a caller may write server.properties and kafka.addr
	# of its own first (the TLS and SASL broker of the tests).
	if [ ! -f "$dir/data/meta.properties" ]; then
		local cluster_id
		cluster_id=$(new_cluster_id)
		kafka_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties"
		"${kafka_cmd[@]}" >"$dir/format.log" 2>&1 ||
			{ cat "$dir/format.log" >&2; die "formatting the KRaft log directory failed"; }
	fi
	local addr
	addr=$(cat "$dir/kafka.addr")
	# A cluster node keeps the small heap it was made with.
	if [ -f "$dir/heap.opts" ]; then
		KAFKA_HEAP_OPTS=$(cat "$dir/heap.opts") kafka_cmd kafka.Kafka "$dir/server.properties"
	else
		kafka_cmd kafka.Kafka "$dir/server.properties"
	fi
	# Its own session, so that a Ctrl-C in the terminal that ran `up` does not stop it.
	setsid "${kafka_cmd[@]}" >>"$dir/kafka.log" 2>&1 </dev/null &
	echo $! >"$dir/kafka.pid"
	wait_kafka "$addr" "$dir"
	log "Kafka $kafka_version up at $addr (state in $dir)"
	echo "$addr"
}

# new_cluster_id prints a random KRaft cluster id. Any base64url 16-byte id
# will do for a throwaway cluster, except one starting with "-":
# kafka-storage then takes it for an option ("argument --cluster-id/-t:
# expected one argument"), which failed about one Kafka start in 64 (seen as
# a flaky chaos test).
new_cluster_id() {
	python3 -c '
import base64, os
while True:
    s = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not s.startswith("-"):
        print(s)
        break
'
}

# kafka_cluster_start DIR N: N combined broker+controller nodes in
# DIR/node1..N, one cluster id, replication factor 3 and min.insync.replicas
# 2 (for N >= 3), small heaps so that three fit beside PostgreSQL on 2 cores.
kafka_cluster_start() {
	local dir=$1 n=${2:-3} i node
	ensure_kafka_jars
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	local rf=$((n < 3 ? n : 3)) isr=$((n < 3 ? 1 : 2))
	if [ ! -f "$dir/cluster.id" ]; then
		local voters="" ports=() cports=()
		for ((i = 1; i <= n; i++)); do
			ports[i]=$(free_port)
			cports[i]=$(free_port)
			voters+="${voters:+,}$i@127.0.0.1:${cports[i]}"
		done
		local cid
		cid=$(new_cluster_id)
		for ((i = 1; i <= n; i++)); do
			node=$dir/node$i
			mkdir -p "$node"
			cat >"$node/server.properties" <<EOF
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:${ports[i]},CONTROLLER://127.0.0.1:${cports[i]}
advertised.listeners=PLAINTEXT://127.0.0.1:${ports[i]}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$node/data
num.partitions=3
default.replication.factor=$rf
min.insync.replicas=$isr
auto.create.topics.enable=true
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
unclean.leader.election.enable=false
EOF
			echo "127.0.0.1:${ports[i]}" >"$node/kafka.addr"
			echo "${KAFKA_HEAP_OPTS:--Xms64m -Xmx256m}" >"$node/heap.opts"
			kafka_cmd kafka.tools.StorageTool format -t "$cid" -c "$node/server.properties"
			"${kafka_cmd[@]}" >"$node/format.log" 2>&1 ||
				{ cat "$node/format.log" >&2; die "formatting the KRaft log directory of node $i failed"; }
		done
		echo "$cid" >"$dir/cluster.id" # last: a failed format starts again from scratch
	fi
	# All at once: a node waits for a quorum of controllers before it answers.
	local nodes=() addrs=""
	for node in "$dir"/node*; do
		nodes+=("$node")
		addrs+="${addrs:+,}$(cat "$node/kafka.addr")"
		if [ -f "$node/kafka.pid" ] && kill -0 "$(cat "$node/kafka.pid")" 2>/dev/null; then
			continue
		fi
		KAFKA_HEAP_OPTS=$(cat "$node/heap.opts") kafka_cmd kafka.Kafka "$node/server.properties"
		setsid "${kafka_cmd[@]}" >>"$node/kafka.log" 2>&1 </dev/null &
		echo $! >"$node/kafka.pid"
	done
	for node in "${nodes[@]}"; do
		wait_kafka "$(cat "$node/kafka.addr")" "$node"
	done
	log "Kafka $kafka_version cluster of ${#nodes[@]} up at $addrs (state in $dir)"
	echo "$addrs"
}

kafka_stop() { stop_pidfile "$1/kafka.pid"; }

# stop_pidfile FILE: stop the process FILE names (SIGTERM, SIGKILL after
# 20 s) and remove FILE.
stop_pidfile() {
	local file=$1 pid i
	[ -f "$file" ] || return 0
	pid=$(cat "$file")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for i in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$file"
}

pg_start() {
	local dir=$1 port=${2:-} bin
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	if [ -f "$dir/data/PG_VERSION" ]; then
		ensure_postgres "$(cat "$dir/data/PG_VERSION")"
		bin=$(cluster_bindir "$dir")
	else
		ensure_postgres
		bin=$(pg_bindir)
	fi
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
	[ -d "$dir/data" ] || return 0
	# The real path, as pg_start uses: the postgres user cannot traverse a
	# root-only directory holding a symlink to it (run's state directory),
	# so pg_ctl status failed there and the server was left running.
	dir=$(cd "$dir" && pwd -P)
	if ! bin=$(cluster_bindir "$dir"); then
		# The binaries are gone (a cleared cache) but the server may not
		# be: stop it by its pid (SIGQUIT: immediate, SIGINT: fast).
		if [ -f "$dir/data/postmaster.pid" ]; then
			local sig=INT
			[ "$mode" = immediate ] && sig=QUIT
			kill -"$sig" "$(head -n 1 "$dir/data/postmaster.pid")" 2>/dev/null || true
			sleep 1
		fi
		return 0
	fi
	if as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
		as_pg "$bin/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null || true
	fi
}

pg_standby() {
	local primary=$1 dir=$2 port=${3:-} bin purl version slot
	primary=$(cd "$primary" && pwd -P)
	bin=$(cluster_bindir "$primary")
	version=$(cat "$primary/data/PG_VERSION")
	purl=$(cat "$primary/pg.url")
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd -P)
	[ -n "$port" ] || port=$(free_port)
	chmod 755 "$dir"
	slot="standby_$port"
	# pgbackup, not pg_basebackup: the zonky binaries have none, and
	# Debian's 15 refuses newer servers. It copies no replication slot, as
	# a base backup in production does not.
	"$(build_tool pgbackup)" -url "$purl" -src "$primary/data" -dst "$dir/data" -slot "$slot" >"$dir/basebackup.log" 2>&1 ||
		{ cat "$dir/basebackup.log" >&2; die "making the base backup failed"; }
	is_root && chown -R postgres: "$dir"
	as_pg tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
port = $port
unix_socket_directories = '$dir'
hot_standby_feedback = on
EOF
	# Slot synchronization (17+): the primary's failover slots are kept on
	# the standby, so a promoted standby continues where they were.
	if [ "$version" -ge 17 ]; then
		echo "sync_replication_slots = on" | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
	fi
	echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$dir/pg.url"
	echo "$slot" >"$dir/primary_slot"
	as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/data/server.log" -w -t 60 start >/dev/null ||
		{ tail -n 40 "$dir/data/server.log" >&2 || true; die "starting the standby failed"; }
	log "PostgreSQL standby of $purl up at $(cat "$dir/pg.url") (state in $dir, physical slot $slot on the primary)"
	cat "$dir/pg.url"
}

pg_promote() {
	local dir=$1 bin
	dir=$(cd "$dir" && pwd -P)
	bin=$(cluster_bindir "$dir")
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

pg_versions() {
	echo "${OUTBOXD_PG_VERSIONS:-15}"
}

write_env() {
	local dir=$1 v first=""
	{
		for v in $(pg_versions); do
			if [ -z "$first" ]; then
				first=$v
				echo "export OUTBOXD_TEST_DATABASE_URL='$(cat "$dir/pg-$v/pg.url")'"
				echo "export OUTBOXD_PG_VERSION='$v'"
			fi
			echo "export OUTBOXD_TEST_DATABASE_URL_$v='$(cat "$dir/pg-$v/pg.url")'"
		done
		echo "export OUTBOXD_PG_VERSIONS='$(pg_versions)'"
		echo "export OUTBOXD_TEST_BROKERS='$(cat "$dir/kafka/kafka.addr")'"
		echo "export OUTBOXD_TESTBED='$here/testbed.sh'"
	} >"$dir/env"
}

up() {
	local dir=$1 v
	mkdir -p "$dir"
	for v in $(pg_versions); do
		ensure_postgres "$v"
	done
	ensure_kafka_jars
	for v in $(pg_versions); do
		# PostgreSQL's data directory must be reachable by the postgres OS
		# user, which a directory under /root is not: keep it under /tmp.
		if [ ! -e "$dir/pg-$v" ]; then
			ln -s "$(mktemp -d /tmp/outboxd-pg.XXXXXX)" "$dir/pg-$v"
		fi
		OUTBOXD_PG_VERSION=$v pg_start "$dir/pg-$v" >/dev/null
	done
	kafka_start "$dir/kafka" >/dev/null
	write_env "$dir"
}

down() {
	local dir=$1 pg
	[ -d "$dir" ] || return 0
	kafka_stop "$dir/kafka"
	for pg in "$dir"/pg-*; do
		[ -e "$pg" ] || continue
		pg_stop "$pg" immediate
		rm -rf "$(readlink -f "$pg")"
	done
	rm -rf "$dir"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
# The state of `up` is per checkout: two clones of one user each have
# their own servers, and `make down` in one never stops the other's.
checkout=$(cd "$here/../.." && pwd -P)
state=${OUTBOXD_TESTBED_DIR:-$HOME/.cache/outboxd/testbed-$(printf %s "$checkout" | sha256sum | cut -c1-12)}
case "$cmd" in
fetch)
	for v in $(pg_versions); do
		ensure_postgres "$v"
	done
	ensure_kafka_jars
	ensure_apicurio
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
state-dir)
	echo "$state"
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
kafka-cluster-start) kafka_cluster_start "$@" ;;
kafka-stop) kafka_stop "$@" ;;
registry-start) registry_start "$@" ;;
registry-stop) registry_stop "$@" ;;
schemacheck) schemacheck ;;
pg-start) pg_start "$@" ;;
pg-stop) pg_stop "$@" ;;
pg-standby) pg_standby "$@" ;;
pg-promote) pg_promote "$@" ;;
pg-move) pg_move "$@" ;;
*)
	sed -n '2,/^set -euo/{/^set -euo/!p}' "$0" | sed 's/^# \{0,1\}//'
	[ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = -h ] || exit 2
	;;
esac
