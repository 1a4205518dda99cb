# shellcheck shell=bash
# Shared helpers for the calmcache benchmarks (bench/microcache, bench/stampede,
# bench/hits). Source it; do not run it.
#
# Everything it starts is tracked and killed on exit (trap), every wait is
# bounded, and all traffic stays on 127.0.0.1.
#
# Environment knobs:
#   BENCH_NO_BUILD=1   use the existing target/release binaries (refused when
#                      a source of theirs changed after they were built)
#   BENCH_KEEP_TMP=1   keep the temp dir (configs, logs, cache dirs) after exit
#                      (it is always kept when the script fails, not when
#                      it is interrupted)
#   BENCH_RESULTS=DIR  where raw results go (default bench/results/NAME-DATE)
#   BENCH_CALMCACHE=F  another calmcache binary (e.g. a stand-in origin for
#                      testing the NGINX/Varnish rows of a script)
#   BENCH_LOADGEN=F    another loadgen binary (a tree without target/)
#   CALM_THREADS=N     calmcache `threads` in write_calm_config (default 2)
#   NGINX_WORKERS=N    NGINX worker_processes in nginx_conf (default 2)
#   NGINX_WORKER_CONNECTIONS=N  NGINX worker_connections in nginx_conf (default
#                      8192; bench/scaling raises it for 10,000 clients)
#   VARNISH_MALLOC=S   Varnish malloc storage size in start_varnish (default 256m)
#   BENCH_CHARTS=0     do not copy the run's chart.svg to bench/charts/NAME.svg
#                      (it is still written to the results dir)

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
CALMCACHE="${BENCH_CALMCACHE:-$REPO_DIR/target/release/calmcache}"
LOADGEN="${BENCH_LOADGEN:-$REPO_DIR/target/release/loadgen}"

BENCH_PIDS=()
BENCH_PORTS=()
BENCH_TMP=""
BENCH_SEQ=0

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# ---------------------------------------------------------------- setup ----

# bench_init NAME: temp dir, results dir, exit trap, fd limit.
bench_init() {
	local name="$1"
	BENCH_NAME="$name"
	BENCH_TMP="$(mktemp -d "/tmp/calmcache-bench-$name.XXXXXX")"
	# nginx workers run as nobody and varnish's jail as varnish/vcache: they
	# must be able to reach their dirs under here.
	chmod 0755 "$BENCH_TMP"
	BENCH_RESULTS="${BENCH_RESULTS:-$BENCH_DIR/results/$name-$(date +%Y%m%d-%H%M%S)}"
	mkdir -p "$BENCH_RESULTS"
	trap bench_cleanup EXIT
	trap 'log "interrupted"; exit 130' INT TERM
	ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
}

bench_cleanup() {
	local rc=$?
	stop_all
	# A script that finished gets its chart (bench/plot.py; never fails the run).
	((rc == 0)) && write_chart
	if [[ -n "$BENCH_TMP" && -d "$BENCH_TMP" ]]; then
		if [[ "${BENCH_KEEP_TMP:-0}" == 1 || ($rc -ne 0 && $rc -ne 130) ]]; then
			log "kept temp dir $BENCH_TMP (logs, configs)"
		else
			rm -rf "$BENCH_TMP"
		fi
	fi
	return "$rc"
}

# ensure_tools: install nginx, varnish, wrk, ab, curl when absent (Debian).
ensure_tools() {
	local missing=()
	command -v nginx >/dev/null || missing+=(nginx)
	command -v varnishd >/dev/null || missing+=(varnish)
	command -v wrk >/dev/null || missing+=(wrk)
	command -v ab >/dev/null || missing+=(apache2-utils)
	command -v curl >/dev/null || missing+=(curl)
	command -v ss >/dev/null || missing+=(iproute2)
	if ((${#missing[@]})); then
		log "installing ${missing[*]}"
		local sudo=""
		[[ $EUID -ne 0 ]] && sudo="sudo"
		$sudo apt-get update
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
	fi
	# Debian starts the packaged services on install; ours run on their own
	# ports and configs, so the system ones are left alone.
}

# stale_source BINARY PATH...: the first file under the PATHs (sources,
# manifests) changed after BINARY was built (cargo relinks a binary only when its
# own crates change, so tests and other crates are not looked at); nothing
# when it is current.
stale_source() {
	local bin="$1"
	shift
	(cd "$REPO_DIR" && find "$@" -type f -newer "$bin" -print -quit 2>/dev/null)
}

# build_release: calmcache and loadgen release binaries, and check that the
# proxy has the subcommands the benchmarks use.
build_release() {
	if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
		log "cargo build --release -p calmcache -p calmcache-loadgen"
		(cd "$REPO_DIR" && cargo build --release -p calmcache -p calmcache-loadgen) >&2
	fi
	[[ -x "$CALMCACHE" ]] || die "$CALMCACHE missing (build failed?)"
	[[ -x "$LOADGEN" ]] || die "$LOADGEN missing (build failed?)"
	# BENCH_NO_BUILD=1 on a tree changed since the build would measure old
	# code under the tree's git revision: refuse (a BENCH_CALMCACHE binary
	# is measured on purpose, with its build time printed).
	if [[ "${BENCH_NO_BUILD:-0}" == 1 && -z "${BENCH_CALMCACHE:-}" ]]; then
		local newer
		newer="$(stale_source "$CALMCACHE" crates/calmcache/src crates/calmcache/Cargo.toml crates/calmcache-core/src crates/calmcache-core/Cargo.toml config.example.toml)"
		[[ -z "$newer" ]] || die "target/release/calmcache is older than $newer: build it (drop BENCH_NO_BUILD) or name it with BENCH_CALMCACHE to measure it anyway"
	fi
	if [[ "${BENCH_NO_BUILD:-0}" == 1 && -z "${BENCH_LOADGEN:-}" ]]; then
		local newer
		# cargo relinks only the binaries whose code changed: the crate was
		# built after a source changed when any of its binaries is newer.
		local newest
		newest="$(ls -t "$LOADGEN" "$(dirname "$LOADGEN")"/{replay,mixload,ws-echo,ws-clients} 2>/dev/null | head -n 1)"
		newer="$(stale_source "${newest:-$LOADGEN}" bench/loadgen/src bench/loadgen/Cargo.toml)"
		[[ -z "$newer" ]] || die "target/release/loadgen is older than $newer: build it (drop BENCH_NO_BUILD) or name it with BENCH_LOADGEN to use it anyway"
	fi
	local help
	help="$("$CALMCACHE" --help 2>&1 || true)"
	if ! grep -qw origin <<<"$help" || ! grep -qw serve <<<"$help"; then
		die "target/release/calmcache has no 'origin'/'serve' subcommands yet"
	fi
}

# print_versions: versions of everything measured, to stdout and the results dir.
print_versions() {
	local rev dirty=""
	rev="$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	# bench/charts/ is rewritten by every run (write_chart): not a change to what is measured
	if [[ -n "$(git -C "$REPO_DIR" status --porcelain --untracked-files=no -- . ':(exclude)bench/charts' 2>/dev/null)" ]]; then
		dirty="-dirty"
	fi
	{
		echo "## versions"
		echo "calmcache   git $rev$dirty ($("$CALMCACHE" --version 2>/dev/null || echo '?'))"
		# git above is the work tree's; a BENCH_CALMCACHE binary may be older.
		[[ -n "${BENCH_CALMCACHE:-}" ]] && echo "            binary $CALMCACHE, built $(date -u -r "$CALMCACHE" +%Y-%m-%dT%H:%M:%SZ)"
		echo "nginx       $(nginx -v 2>&1 | sed 's/^nginx version: //')"
		echo "varnishd    $(varnishd -V 2>&1 | head -1)"
		echo "wrk         $(wrk -v 2>&1 | head -1 | awk '{print $2}')"
		echo "rustc       $(rustc --version 2>/dev/null || echo '?')"
		echo "kernel      $(uname -sr)"
		echo "cpu         $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
		echo "date        $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	} | tee "$BENCH_RESULTS/versions.txt"
}

# ---------------------------------------------------------- processes ----

# spawn NAME CMD...: run CMD in the background, log to $BENCH_TMP/NAME.log,
# remember its pid (in SPAWNED_PID too).
spawn() {
	local name="$1"
	shift
	"$@" >"$BENCH_TMP/$name.log" 2>&1 &
	SPAWNED_PID=$!
	BENCH_PIDS+=("$SPAWNED_PID")
}

# stop_pid PID: TERM, up to 5 s grace, then KILL.
stop_pid() {
	local pid="$1" i
	kill -0 "$pid" 2>/dev/null || {
		wait "$pid" 2>/dev/null || true
		return 0
	}
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# stop_all: stop everything this script started (newest first).
stop_all() {
	local i
	for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do
		stop_pid "${BENCH_PIDS[$i]}"
	done
	BENCH_PIDS=()
	BENCH_PORTS=()
}

# free_port: a loopback TCP port nobody listens on and we have not handed out.
free_port() {
	local port tries used
	used="$(ss -Htan 2>/dev/null | awk '{n=split($4,a,":"); print a[n]}')"
	for ((tries = 0; tries < 200; tries++)); do
		# below the kernel's ephemeral range (32768+), so no outgoing socket takes it
		port=$((20000 + RANDOM % 12000))
		grep -qx "$port" <<<"$used" && continue
		[[ " ${BENCH_PORTS[*]} " == *" $port "* ]] && continue
		# Callers run this in $(...), where BENCH_PORTS+= is lost: the ports
		# handed out are also kept in a file, so two of them never collide
		# before their servers listen (admin port = TLS port, seen once).
		if [[ -n "$BENCH_TMP" ]]; then
			grep -qx "$port" "$BENCH_TMP/.ports" 2>/dev/null && continue
			echo "$port" >>"$BENCH_TMP/.ports"
		fi
		BENCH_PORTS+=("$port")
		echo "$port"
		return 0
	done
	die "no free port found"
}

# wait_http URL PID [SECONDS]: until URL answers (any HTTP status), or die
# with the log of the process if it exits or the time runs out.
wait_http() {
	local url="$1" pid="$2" secs="${3:-15}" i
	for ((i = 0; i < secs * 10; i++)); do
		if curl -s -o /dev/null -m 2 "$url"; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			log "process $pid exited while waiting for $url"
			tail -n 30 "$BENCH_TMP"/*.log >&2 || true
			die "start-up failed"
		fi
		sleep 0.1
	done
	tail -n 30 "$BENCH_TMP"/*.log >&2 || true
	die "$url did not answer within ${secs}s"
}

# fetch_header URL HEADER: value of one response header of a GET (empty if none).
fetch_header() {
	curl -s -m 10 -o /dev/null -D - "$1" | tr -d '\r' |
		awk -v h="$(tr '[:upper:]' '[:lower:]' <<<"$2")" 'BEGIN{FS=": "} tolower($1)==h {sub(/^[^:]*: /,""); print; exit}'
}

# cache_header URL: the first of Cache-Status / X-Cache-Status / X-Cache.
cache_header() {
	curl -s -m 10 -o /dev/null -D - "$1" | tr -d '\r' |
		awk 'tolower($0) ~ /^(cache-status|x-cache-status|x-cache):/ {print; exit}'
}

# ------------------------------------------------------------- origin ----

# start_origin ARGS...: `calmcache origin` on a free port; sets ORIGIN_PORT.
start_origin() {
	ORIGIN_PORT="$(free_port)"
	spawn origin "$CALMCACHE" origin --listen "127.0.0.1:$ORIGIN_PORT" "$@"
	ORIGIN_PID=$SPAWNED_PID
	wait_http "http://127.0.0.1:$ORIGIN_PORT/__origin/stats" "$ORIGIN_PID"
}

origin_stats() {
	curl -s -m 5 "http://127.0.0.1:$ORIGIN_PORT/__origin/stats" ||
		die "origin on port $ORIGIN_PORT does not answer /__origin/stats (curl exit $?)"
}

# origin_requests: GETs the origin has served since the last reset.
origin_requests() {
	origin_stats | sed -n 's/.*"requests"[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p'
}

origin_reset() {
	curl -s -m 5 -o /dev/null -X POST "http://127.0.0.1:$ORIGIN_PORT/__origin/reset" ||
		die "origin on port $ORIGIN_PORT does not answer /__origin/reset (curl exit $?)"
}

# wait_origin_idle: until no request is in flight at the origin (max 10 s), so
# a fill triggered by a readiness probe does not leak into the next count.
wait_origin_idle() {
	local i
	for ((i = 0; i < 100; i++)); do
		origin_stats | grep -Eq '"in_flight"[[:space:]]*:[[:space:]]*0([^0-9]|$)' && return 0
		sleep 0.1
	done
	log "origin still busy after 10 s"
}

# origin_sampler_start GROUP RUN ROW: until origin_sampler_stop, read
# GET /__origin/stats every 0.5 s and append "GROUP RUN ROW t_unix requests"
# to $BENCH_RESULTS/origin-timeline.tsv, the origin's requests over time that
# bench/plot.py draws (microcache, stampede). Start it right after
# origin_reset; one curl per 0.5 s is all it adds to the measured run.
origin_sampler_start() {
	local f="$BENCH_RESULTS/origin-timeline.tsv"
	[[ -s "$f" ]] || printf 'group\trun\trow\tt_unix\trequests\n' >"$f"
	spawn origin-sampler origin_sampler_loop "$f" "$@"
	ORIGIN_SAMPLER_PID=$SPAWNED_PID
}

origin_sampler_loop() {
	# a background subshell: it must not run the script's exit trap (stop_all)
	trap - EXIT
	local f="$1" group="$2" run="$3" row="$4" n t
	sample() {
		n="$(curl -s -m 1 "http://127.0.0.1:$ORIGIN_PORT/__origin/stats" |
			sed -n 's/.*"requests"[[:space:]]*:[[:space:]]*\([0-9]*\).*/\1/p')"
		t="${EPOCHREALTIME/,/.}"
		[[ -n "$n" ]] && printf '%s\t%s\t%s\t%s\t%s\n' "$group" "$run" "$row" "$t" "$n" >>"$f"
	}
	# one last sample when stopped (after the run's own count was read)
	trap 'sample; exit 0' TERM
	trap 'exit 0' INT
	while :; do
		sample
		sleep 0.5
	done
}

origin_sampler_stop() {
	[[ -n "${ORIGIN_SAMPLER_PID:-}" ]] && stop_pid "$ORIGIN_SAMPLER_PID"
	ORIGIN_SAMPLER_PID=""
}

# ---------------------------------------------------------- calmcache ----

# start_calmcache ORIGIN_PORT ROUTE_TOML: calmcache serve with a memory zone;
# ROUTE_TOML is appended to the single [[routes]] table (upstream "app",
# zone "ram" unless ROUTE_TOML says `#nozone`). Sets PROXY_PORT, ADMIN_PORT.
start_calmcache() {
	local origin_port="$1" route="$2" zone_line='zone = "ram"'
	BENCH_SEQ=$((BENCH_SEQ + 1))
	[[ "$route" == *"#nozone"* ]] && zone_line=""
	write_calm_config "$BENCH_TMP/calmcache-$BENCH_SEQ/calmcache.toml" "$origin_port" '[zones.ram]
kind = "memory"
max_size = "256MiB"
max_object_size = "16MiB"' "$zone_line
$route"
	start_calmcache_file "$BENCH_TMP/calmcache-$BENCH_SEQ/calmcache.toml"
}

# calm_status: the admin counters (JSON) of the running calmcache.
calm_status() { curl -s -m 5 "http://127.0.0.1:$ADMIN_PORT/status" || true; }

# -------------------------------------------------------------- nginx ----

# start_nginx MODE ORIGIN_PORT [TTL]: nginx with its own config; sets PROXY_PORT.
# NGINX_SENDFILE=off turns sendfile off (faster for small cached bodies here).
#   proxy    proxy_pass only (no cache)
#   cache    proxy_cache + proxy_cache_valid 200 TTL
#   lockbg   cache + proxy_cache_lock + use_stale updating + background_update
#   honor    proxy_cache, freshness from the origin's Cache-Control
#   honorbg  honor + proxy_cache_lock + use_stale updating + background_update
#   ceiling  `return 200` with a 1 KB body (no upstream)
start_nginx() {
	local mode="$1" origin_port="$2" ttl="${3:-1s}" dir loc
	PROXY_PORT="$(free_port)"
	BENCH_SEQ=$((BENCH_SEQ + 1))
	dir="$BENCH_TMP/nginx-$BENCH_SEQ"
	mkdir -p "$dir/cache" "$dir/tmp"
	chmod 0755 "$dir" "$dir/tmp"
	local proxy='proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";'
	# shellcheck disable=SC2016 # $upstream_cache_status is an nginx variable
	local cache='proxy_cache calm;
            add_header X-Cache-Status $upstream_cache_status always;'
	case "$mode" in
	proxy) loc="$proxy" ;;
	cache) loc="$proxy
            $cache
            proxy_cache_valid 200 $ttl;" ;;
	lockbg) loc="$proxy
            $cache
            proxy_cache_valid 200 $ttl;
            proxy_cache_lock on;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;" ;;
	honor) loc="$proxy
            $cache" ;;
	honorbg) loc="$proxy
            $cache
            proxy_cache_lock on;
            proxy_cache_use_stale updating;
            proxy_cache_background_update on;" ;;
	ceiling) loc="default_type text/html;
            return 200 \"$(head -c 1024 /dev/zero | tr '\0' 'x')\";" ;;
	*) die "unknown nginx mode $mode" ;;
	esac
	nginx_conf "$dir" "$PROXY_PORT" "$origin_port" \
		"proxy_cache_path $dir/cache levels=1:2 keys_zone=calm:16m max_size=1g inactive=10m use_temp_path=off;" \
		"$loc"
	PROXY_CONFIG="$dir/nginx.conf"
	spawn "nginx-$BENCH_SEQ" nginx -p "$dir" -c "$dir/nginx.conf" -g 'daemon off;'
	PROXY_PID=$SPAWNED_PID
	wait_listen "$PROXY_PORT" "$PROXY_PID"
}

# wait_listen PORT PID: until something listens on 127.0.0.1:PORT (max 15 s).
wait_listen() {
	local port="$1" pid="$2" i
	for ((i = 0; i < 150; i++)); do
		if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$BENCH_TMP"/*.log >&2 || true
			die "process $pid exited before listening on $port"
		fi
		sleep 0.1
	done
	die "nothing listens on $port after 15 s"
}

# ------------------------------------------------------------ varnish ----

# start_varnish MODE ORIGIN_PORT [TTL GRACE]: varnishd in the foreground with a
# generated VCL and a malloc store ($VARNISH_MALLOC, 256m); sets PROXY_PORT. It adds
# `X-Cache: HIT|MISS` (HIT = served from a cached object, fresh or in grace).
#   grace    beresp.ttl = TTL, beresp.grace = GRACE, whatever the origin says
#   honor    freshness from the origin's Cache-Control (built-in VCL)
start_varnish() {
	local mode="$1" origin_port="$2" ttl="${3:-1s}" grace="${4:-10s}" dir be_resp=""
	PROXY_PORT="$(free_port)"
	BENCH_SEQ=$((BENCH_SEQ + 1))
	dir="$BENCH_TMP/varnish-$BENCH_SEQ"
	mkdir -p "$dir"
	chmod 0755 "$dir"
	case "$mode" in
	grace) be_resp="set beresp.ttl = $ttl; set beresp.grace = $grace;" ;;
	honor) be_resp="" ;;
	*) die "unknown varnish mode $mode" ;;
	esac
	cat >"$dir/default.vcl" <<EOF
vcl 4.1;
backend default {
    .host = "127.0.0.1";
    .port = "$origin_port";
}
sub vcl_backend_response {
    $be_resp
}
sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
EOF
	PROXY_CONFIG="$dir/default.vcl"
	# As root, varnishd's default jail (-j unix) drops to the packaged
	# 'varnish'/'vcache' users, which works here; '-j none' is the fallback
	# where those users do not exist.
	local jail=()
	if [[ $EUID -eq 0 ]] && ! getent passwd vcache >/dev/null; then
		jail=(-j none)
	fi
	spawn "varnish-$BENCH_SEQ" varnishd -F "${jail[@]}" -a "127.0.0.1:$PROXY_PORT" \
		-T 127.0.0.1:0 -n "$dir/work" -f "$dir/default.vcl" -s "malloc,${VARNISH_MALLOC:-256m}"
	PROXY_PID=$SPAWNED_PID
	wait_listen "$PROXY_PORT" "$PROXY_PID"
}

# -------------------------------------------------------------- tools ----

# background_cpu: percent of all CPUs busy over 0.5 s, measured while none of
# our processes run: other people's builds or benchmarks spoil the figures.
background_cpu() {
	local a b
	a="$(head -1 /proc/stat)"
	sleep 0.5
	b="$(head -1 /proc/stat)"
	awk -v a="$a" -v b="$b" 'BEGIN {
		n = split(a, x, " "); split(b, y, " ")
		for (i = 2; i <= n; i++) { d = y[i] - x[i]; tot += d; if (i == 5 || i == 6) idle += d }
		printf "%.0f\n", (tot > 0 ? 100 * (1 - idle / tot) : 0)
	}'
}

# check_quiet LABEL: measure background CPU (sets BG_CPU) and warn when the
# machine is not quiet enough to measure.
check_quiet() {
	stop_all
	BG_CPU="$(background_cpu)"
	if ((BG_CPU > 10)); then
		log "WARNING: $1: ${BG_CPU}% of the CPUs busy before the run (someone else is using the machine): figures unreliable"
	fi
}

# warn_if_noisy RAW_TSV COLUMN: summary warning if any row had background CPU.
warn_if_noisy() {
	local worst
	worst="$(awk -F'\t' -v c="$2" 'NR > 1 && $c + 0 > m {m = $c + 0} END {print m + 0}' "$1")"
	if ((worst > 10)); then
		echo "WARNING: up to ${worst}% of the CPUs were busy with other work before some rows (column bg_cpu in raw.tsv): rerun on a quiet machine before quoting these figures"
	fi
}

# run_bounded SECONDS OUTFILE CMD...: CMD with stdout+stderr to OUTFILE, killed
# after SECONDS; run in the background and waited for, so that a TERM or INT
# to the script is handled at once (bash defers traps while a foreground
# child runs). Returns CMD's exit status.
run_bounded() {
	local secs="$1" out="$2" pid rc=0
	shift 2
	timeout "$secs" "$@" >"$out" 2>&1 &
	pid=$!
	BENCH_PIDS+=("$pid")
	wait "$pid" || rc=$?
	return "$rc"
}

# run_wrk OUTFILE SECONDS THREADS CONNS URL: wrk with --latency, bounded.
# The 10 s socket timeout keeps wrk from dropping slow requests (its default
# of 2 s would hide the origin-alone row's 3 s latencies as "timeouts").
run_wrk() {
	local out="$1" secs="$2" threads="$3" conns="$4" url="$5" rc=0
	run_bounded $((secs + 30)) "$out" wrk -t"$threads" -c"$conns" -d"${secs}s" --timeout 10s --latency "$url" || rc=$?
	if ((rc != 0)); then log "wrk exited with $rc (see $out)"; fi
}

# wrk_parse FILE: "rps mean_ms stdev_ms p99_ms max_ms errors", from wrk --latency output.
wrk_parse() {
	awk '
	function ms(v,   n, u) {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") return n / 1000
		if (u == "ms") return n
		if (u == "s") return n * 1000
		if (u == "m") return n * 60000
		if (u == "h") return n * 3600000
		return n
	}
	$1 == "Latency" && NF >= 4 { mean = ms($2); sd = ms($3); mx = ms($4) }
	$1 == "99%" { p99 = ms($2) }
	$1 == "Requests/sec:" { rps = $2 }
	/Socket errors:/ { gsub(/,/, ""); err += $4 + $6 + $8 + $10 }
	/Non-2xx or 3xx responses:/ { err += $NF }
	END {
		if (rps == "") { print "NA NA NA NA NA NA"; exit }
		printf "%.1f %.3f %.3f %.3f %.3f %d\n", rps, mean, sd, p99, mx, err
	}' "$1"
}

# json_num KEY: a top-level number from a one-line JSON object on stdin.
json_num() {
	sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\(-\{0,1\}[0-9.eE+-]*\).*/\1/p" | head -1
}

# json_obj KEY: a flat {...} object value from one-line JSON on stdin.
json_obj() {
	sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\({[^}]*}\).*/\1/p" | head -1
}

# filter_rows WANTED ROW...: the ROWs named in the comma list WANTED (all if empty).
filter_rows() {
	local wanted="$1" r
	shift
	for r in "$@"; do
		if [[ -z "$wanted" || ",$wanted," == *",$r,"* ]]; then echo "$r"; fi
	done
}

# median: median of the numbers on stdin (NA ignored; NA if none).
median() {
	grep -Ev '^(NA|)$' | sort -g | awk '{v[NR] = $1} END {
		if (NR == 0) { print "NA"; exit }
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2
	}'
}

# ratio A B [DIGITS]: A / B, or NA.
ratio() {
	awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
		if (a == "NA" || b == "NA" || b + 0 == 0) print "NA"; else printf "%.*f\n", d, a / b
	}'
}

# fmt_ms MS: 0.123 -> "0.12 ms", 1234 -> "1.23 s".
fmt_ms() {
	awk -v v="$1" 'BEGIN {
		if (v == "NA") print "NA"
		else if (v >= 1000) printf "%.2f s\n", v / 1000
		else if (v >= 100) printf "%.0f ms\n", v
		else printf "%.2f ms\n", v
	}'
}

# ------------------------------------------------------ disk benchmarks ----
# Helpers added for bench/cachefill, bench/diskhits and bench/diskindex: disk
# zones, cache directories that can hold gigabytes, nested /status fields.

# Cache data directories (removed on exit, even when the temp dir is kept).
BENCH_DATA_DIRS=()

# bench_init_disk NAME: bench_init, plus an exit trap that stops everything
# and removes the registered cache data dirs before bench_cleanup runs (a
# failed run keeps its logs and configs, never gigabytes of cache files).
bench_init_disk() {
	bench_init "$1"
	trap bench_disk_cleanup EXIT
}

bench_disk_cleanup() {
	local rc=$? d
	stop_all
	for d in "${BENCH_DATA_DIRS[@]}"; do
		[[ -n "$d" && -d "$d" ]] && rm -rf "$d"
	done
	# bench_cleanup reads the exit status from $?: hand it over unchanged.
	if ((rc == 0)); then
		true
		bench_cleanup
	else
		(exit "$rc") || bench_cleanup
	fi
}

# data_dir PATH: create PATH (mode 0755, for nginx workers running as nobody)
# and register it for removal on exit.
data_dir() {
	mkdir -p "$1"
	chmod 0755 "$1"
	BENCH_DATA_DIRS+=("$1")
}

# ensure_jq: install jq when absent (the disk scripts read nested /status fields).
ensure_jq() {
	command -v jq >/dev/null && return 0
	log "installing jq"
	local sudo=""
	[[ $EUID -ne 0 ]] && sudo="sudo"
	$sudo apt-get update
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y jq
}

# ensure_cmd CMD PACKAGE: install the Debian PACKAGE when CMD is absent
# (h2load: nghttp2-client).
ensure_cmd() {
	command -v "$1" >/dev/null && return 0
	log "installing $2"
	local sudo=""
	[[ $EUID -ne 0 ]] && sudo="sudo"
	$sudo apt-get update
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "$2"
	command -v "$1" >/dev/null || die "$1 still missing after installing $2"
}

# fs_avail_bytes DIR: bytes available to us on DIR's file system.
fs_avail_bytes() { df -B1 --output=avail "$1" | tail -1 | tr -d ' '; }

# fs_describe DIR: "ext4 /dev/vda mounted on /, 72G free of 252G".
fs_describe() {
	df -hT "$1" | awk 'NR == 2 {printf "%s %s mounted on %s, %s free of %s\n", $2, $1, $7, $5, $3}'
}

# files_bytes DIR...: sum of the apparent sizes of the regular files under
# DIR... (`du -sb` without the directories' own 4 KiB).
# (mawk's %d stops at 2^31 - 1: whole numbers are printed with %.0f.)
files_bytes() {
	find "$@" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'
}

# files_count DIR...: regular files under DIR...
files_count() { find "$@" -type f 2>/dev/null | wc -l | tr -d ' '; }

# files_count_named GLOB DIR...: regular files under DIR... named GLOB.
files_count_named() {
	local glob="$1"
	shift
	find "$@" -type f -name "$glob" 2>/dev/null | wc -l | tr -d ' '
}

# blocks_bytes DIR...: bytes of disk blocks used under DIR... (`du -sk`,
# directories included).
blocks_bytes() { du -skc "$@" 2>/dev/null | tail -1 | awk '{printf "%.0f\n", $1 * 1024}'; }

# proc_kb PID FIELD: a /proc/PID/status field in kB (VmRSS, VmHWM), or NA.
proc_kb() { awk -v f="$2:" '$1 == f {print $2; found = 1} END {if (!found) print "NA"}' "/proc/$1/status" 2>/dev/null || echo NA; }

# calm_disk_zone NAME PATH MAX_SIZE MAX_OBJECT_SIZE [INACTIVE]: a [zones.NAME]
# disk table (inactive 10m unless given).
calm_disk_zone() {
	cat <<EOT
[zones.$1]
kind = "disk"
path = "$2"
max_size = "$3"
max_object_size = "$4"
inactive = "${5:-10m}"
EOT
}

# write_calm_config FILE ORIGIN_PORT ZONES_TOML ROUTE_TOML: a calmcache config
# (threads = $CALM_THREADS or 2, keepalive_requests 1000000 as the NGINX configs here, upstream
# "app" keepalive 32, one [[routes]] table with ROUTE_TOML) on fresh loopback
# ports; sets PROXY_PORT, ADMIN_PORT. CALM_SERVER_EXTRA goes at the end of
# the [server] table (keys such as tls_listen, then [[server.tls]] tables).
write_calm_config() {
	local file="$1" origin_port="$2" zones="$3" route="$4"
	PROXY_PORT="$(free_port)"
	ADMIN_PORT="$(free_port)"
	mkdir -p "$(dirname "$file")"
	cat >"$file" <<EOT
[server]
listen = ["127.0.0.1:$PROXY_PORT"]
threads = ${CALM_THREADS:-2}
keepalive_requests = 1000000
${CALM_SERVER_EXTRA:-}

[admin]
listen = "127.0.0.1:$ADMIN_PORT"

[upstreams.app]
servers = ["127.0.0.1:$origin_port"]
keepalive = 32

$zones

[[routes]]
upstream = "app"
$route
EOT
}

# calm_check FILE: true when `calmcache check` accepts FILE (its output is
# kept in FILE.check).
calm_check() { "$CALMCACHE" check --config "$1" >"$1.check" 2>&1; }

# start_calmcache_file FILE [SECONDS]: calmcache serve with a config written by
# write_calm_config (PROXY_PORT/ADMIN_PORT as it set them); sets PROXY_PID.
start_calmcache_file() {
	PROXY_CONFIG="$1"
	BENCH_SEQ=$((BENCH_SEQ + 1))
	spawn "calmcache-$BENCH_SEQ" "$CALMCACHE" serve --config "$PROXY_CONFIG"
	PROXY_PID=$SPAWNED_PID
	wait_http "http://127.0.0.1:$ADMIN_PORT/status" "$PROXY_PID" "${2:-15}"
}

# calm_jq FILTER [JQ ARGS...]: FILTER applied to calmcache's /status, or NA
# when calmcache does not answer.
calm_jq() {
	local s out
	s="$(calm_status)"
	out="$(jq -r "${@:2}" "$1" <<<"$s" 2>/dev/null || true)"
	echo "${out:-NA}"
}

# calm_zone_total FIELD: sum over zones of /status .zones[].FIELD.
# shellcheck disable=SC2016 # jq variables, not shell ones
calm_zone_total() { calm_jq '[.zones[][$f] // 0] | add // 0' --arg f "$1"; }

# calm_disk_total FIELD: sum over disk zones of .zones[].disk.FIELD.
# shellcheck disable=SC2016
calm_disk_total() { calm_jq '[.zones[] | select(.disk) | .disk[$f] // 0] | add // 0' --arg f "$1"; }

# calm_zone_field ZONE FIELD: one zone's top-level FIELD.
# shellcheck disable=SC2016
calm_zone_field() { calm_jq '.zones[$z][$f] // "NA"' --arg z "$1" --arg f "$2"; }

# calm_loader_done: "true" when every disk zone's loader has finished.
calm_loader_done() { calm_jq '[.zones[] | select(.disk) | .disk.loader_done] | all'; }

# nginx_conf DIR PORT ORIGIN_PORT HTTP_EXTRA LOCATION: DIR/nginx.conf with the
# settings start_nginx uses ($NGINX_WORKERS or 2 workers, $NGINX_WORKER_CONNECTIONS
# or 8192 worker_connections, sendfile $NGINX_SENDFILE or on,
# tcp_nopush off, keepalive_requests 1000000, temp paths under DIR/tmp,
# upstream "app" with keepalive 32 when ORIGIN_PORT is set); HTTP_EXTRA goes
# into the http block (proxy_cache_path, split_clients), LOCATION into
# `location /`. NGINX_LISTEN adds parameters to the listen directive
# (`ssl http2`), NGINX_SERVER directives to the server block (ssl_certificate).
nginx_conf() {
	local dir="$1" port="$2" origin_port="$3" extra="$4" loc="$5" upstream=""
	mkdir -p "$dir/tmp"
	chmod 0755 "$dir" "$dir/tmp"
	if [[ -n "$origin_port" ]]; then
		upstream="upstream app {
        server 127.0.0.1:$origin_port;
        keepalive 32;
        keepalive_requests 1000000;
    }"
	fi
	cat >"$dir/nginx.conf" <<EOT
worker_processes ${NGINX_WORKERS:-2};
worker_rlimit_nofile 65536;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections ${NGINX_WORKER_CONNECTIONS:-8192}; }
http {
    access_log off;
    sendfile ${NGINX_SENDFILE:-on};
    tcp_nopush off;   # Debian's default 'on' stalls cached hits over ~64 KB by 40 ms
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    $extra
    $upstream
    server {
        listen 127.0.0.1:$port${NGINX_LISTEN:+ $NGINX_LISTEN};
        ${NGINX_SERVER:-}
        location / {
            $loc
        }
    }
}
EOT
}

# start_nginx_dir NAME DIR PORT: nginx with DIR/nginx.conf (from nginx_conf),
# until it listens on PORT; sets SPAWNED_PID.
start_nginx_dir() {
	spawn "$1" nginx -p "$2" -c "$2/nginx.conf" -g 'daemon off;'
	wait_listen "$3" "$SPAWNED_PID"
}

# run_wrk_lua OUTFILE SECONDS THREADS CONNS URL SCRIPT [ARGS...]: wrk with a
# Lua script (and script arguments after --), --latency, 10 s socket timeout,
# bounded.
run_wrk_lua() {
	local out="$1" secs="$2" threads="$3" conns="$4" url="$5" script="$6" rc=0
	shift 6
	run_bounded $((secs + 30)) "$out" wrk -t"$threads" -c"$conns" -d"${secs}s" --timeout 10s --latency \
		-s "$script" "$url" -- "$@" || rc=$?
	if ((rc != 0)); then log "wrk exited with $rc (see $out)"; fi
}

# wrk_requests FILE: total requests of a wrk run ("N requests in ...").
wrk_requests() { awk '/ requests in / {print $1; f = 1} END {if (!f) print "NA"}' "$1"; }

# wrk_mib_per_s FILE: wrk's Transfer/sec in MiB/s (wrk's units are binary).
wrk_mib_per_s() {
	awk '$1 == "Transfer/sec:" {
		v = $2 + 0; u = $2; sub(/^[0-9.]+/, "", u)
		if (u == "B") v /= 1048576; else if (u == "KB") v /= 1024
		else if (u == "GB") v *= 1024; else if (u == "TB") v *= 1048576
		printf "%.1f\n", v; f = 1
	} END {if (!f) print "NA"}' "$1"
}

# median_or_na: like median, but safe under `set -o pipefail` when every
# input is NA (median's grep then exits 1 and kills the caller).
median_or_na() {
	{ grep -Ev '^(NA|)$' || true; } | sort -g | awk '{v[NR] = $1} END {
		if (NR == 0) { print "NA"; exit }
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2
	}'
}

# --------------------------------------------------------------- chart ----

# write_chart: bench/plot.py on this run's results dir: chart.svg there, and
# a copy in bench/charts/ (named by the bench: NAME.svg, stampede-grid.svg for
# the sus-grid profile) that bench/README.md shows, unless BENCH_CHARTS=0.
# Run by bench_cleanup when a script exits 0; benches without a chart spec
# (conformance, diskindex, chaos) are skipped. Never fails the run.
write_chart() {
	[[ -n "${BENCH_CHART_DONE:-}" || -z "${BENCH_RESULTS:-}" ]] && return 0
	BENCH_CHART_DONE=1
	command -v python3 >/dev/null || {
		log "chart: no python3, skipped"
		return 0
	}
	local args=("$BENCH_DIR/plot.py" "$BENCH_RESULTS" --name "${BENCH_NAME:-}" --quiet-unknown)
	[[ "${BENCH_CHARTS:-1}" != 0 ]] && args+=(--charts-dir "$BENCH_DIR/charts")
	python3 "${args[@]}" >&2 || log "chart: bench/plot.py failed (exit $?); the results are unaffected"
	return 0
}

# ------------------------------------------------------------ proxy CPU ----
# Used by bench/h2 and bench/scaling.

# ticks_of STATFILE: user + system clock ticks in a /proc/.../stat file (0 if gone).
ticks_of() {
	local f
	f="$(cat "$1" 2>/dev/null)" || {
		echo 0
		return
	}
	f="${f##*) }" # fields after "(comm) ": state is $1, utime $12, stime $13
	awk '{print $12 + $13}' <<<"$f"
}

# proxy_ticks PID: CPU clock ticks of PID and its children (NGINX's workers).
proxy_ticks() {
	local p t=0
	for p in "$1" $(ps --ppid "$1" -o pid= 2>/dev/null); do t=$((t + $(ticks_of "/proc/$p/stat"))); done
	echo "$t"
}

# proxy_rss_kb PID: VmRSS of PID and its children summed, in kB (NA if gone).
proxy_rss_kb() {
	local p t=0 v
	for p in "$1" $(ps --ppid "$1" -o pid= 2>/dev/null); do
		v="$(proc_kb "$p" VmRSS)"
		[[ "$v" == NA ]] || t=$((t + v))
	done
	((t > 0)) && echo "$t" || echo NA
}

# ------------------------------------------------------ scratch file system ----
# A private file system for the cache files of one row (bench/cachefill,
# issue 29): a sparse image file under $BENCH_TMP formatted ext4 (mkfs
# defaults, journal on) and loop-mounted with direct I/O, so the cache's pages
# are cached once (by the scratch file system) and written back straight to
# the disk under /tmp. A new one per row: no row meets another process's or
# an earlier row's deleted inodes, fragmented free space or dirty pages, and
# the row's files go in one `umount`. Needs root (losetup, mount); the EXIT
# trap calls scratch_fs_drop.
SCRATCH_IMG=""
SCRATCH_DEV=""
SCRATCH_MNT=""

# scratch_fs_new BYTES: a fresh ext4 of BYTES at $SCRATCH_MNT (dropping the
# previous one first).
scratch_fs_new() {
	local bytes="$1"
	scratch_fs_drop
	((EUID == 0)) || die "a private scratch file system needs root (losetup, mount)"
	if ! command -v mkfs.ext4 >/dev/null || ! command -v losetup >/dev/null; then
		die "mkfs.ext4 and losetup are needed (e2fsprogs, mount)"
	fi
	SCRATCH_IMG="$BENCH_TMP/scratch.img"
	SCRATCH_MNT="$BENCH_TMP/scratch"
	# Whole MiB: a loop device ignores a partial last sector (and warns).
	truncate -s $((bytes / 1048576 * 1048576)) "$SCRATCH_IMG"
	mkfs.ext4 -q -F -m 0 "$SCRATCH_IMG" || die "mkfs.ext4 $SCRATCH_IMG failed"
	SCRATCH_DEV="$(losetup --find --show --direct-io=on "$SCRATCH_IMG")" || die "losetup $SCRATCH_IMG failed"
	mkdir -p "$SCRATCH_MNT"
	# noinit_itable: no background zeroing of inode tables during the row.
	mount -o noinit_itable "$SCRATCH_DEV" "$SCRATCH_MNT" || die "mount $SCRATCH_DEV failed"
	chmod 0755 "$SCRATCH_MNT"
}

# scratch_fs_drop: unmount, detach and delete the scratch file system (no-op
# when there is none; safe to call twice, from the EXIT trap too).
scratch_fs_drop() {
	if [[ -n "$SCRATCH_MNT" ]] && mountpoint -q "$SCRATCH_MNT"; then
		umount "$SCRATCH_MNT" || umount -l "$SCRATCH_MNT" || log "WARNING: could not unmount $SCRATCH_MNT"
	fi
	[[ -n "$SCRATCH_DEV" ]] && { losetup -d "$SCRATCH_DEV" 2>/dev/null || true; }
	[[ -n "$SCRATCH_IMG" ]] && rm -f "$SCRATCH_IMG"
	SCRATCH_DEV=""
	SCRATCH_IMG=""
	return 0
}

# scratch_fs_describe: what the scratch file system is, for versions.txt.
scratch_fs_describe() {
	echo "ext4 (mkfs.ext4 defaults, journal, -m 0) on a sparse image, loop device with direct I/O (losetup --direct-io=on), mounted noinit_itable, new for every row; image on $(fs_describe "$BENCH_TMP")"
}
