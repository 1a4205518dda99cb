# shellcheck shell=bash
# WebSocket helpers shared by bench/websocket and bench/artillery-ws (seed
# 001). Source it after lib.sh; do not run it.
#
# Environment knobs (besides lib.sh's):
#   BENCH_LOADGEN_DIR=D  where ws-echo and ws-clients are (default: the
#                        release dir of $CARGO_TARGET_DIR, else target/release)
#   BENCH_CALMCACHE=F    (lib.sh) another calmcache binary; without it,
#                        $CARGO_TARGET_DIR/release/calmcache when that is set

WS_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_DIR/target}"
[[ "$WS_TARGET_DIR" == /* ]] || WS_TARGET_DIR="$REPO_DIR/$WS_TARGET_DIR"
if [[ -z "${BENCH_CALMCACHE:-}" ]]; then
	CALMCACHE="$WS_TARGET_DIR/release/calmcache"
fi
WS_BIN_DIR="${BENCH_LOADGEN_DIR:-$WS_TARGET_DIR/release}"
WS_ECHO="$WS_BIN_DIR/ws-echo"
WS_CLIENTS="$WS_BIN_DIR/ws-clients"
# shellcheck disable=SC2034 # read by the scripts that source this file
CLK_TCK="$(getconf CLK_TCK)"

# ws_ensure_tools: nginx, curl, ss, jq (Debian packages) when absent.
ws_ensure_tools() {
	ensure_cmd nginx nginx
	ensure_cmd curl curl
	ensure_cmd ss iproute2
	ensure_cmd jq jq
}

# ws_build: calmcache, ws-echo and ws-clients (release) unless BENCH_NO_BUILD=1.
ws_build() {
	if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
		log "cargo build --release -p calmcache -p calmcache-loadgen"
		(cd "$REPO_DIR" && cargo build --release -p calmcache -p calmcache-loadgen) >&2
	fi
	[[ -x "$CALMCACHE" ]] || die "$CALMCACHE missing (build failed? BENCH_CALMCACHE?)"
	[[ -x "$WS_ECHO" ]] || die "$WS_ECHO missing (build failed? BENCH_LOADGEN_DIR?)"
	[[ -x "$WS_CLIENTS" ]] || die "$WS_CLIENTS missing (build failed? BENCH_LOADGEN_DIR?)"
}

# ws_versions: lib.sh's print_versions plus what matters here.
ws_versions() {
	print_versions
	{
		echo "binaries    $CALMCACHE; $WS_BIN_DIR/ws-{echo,clients}"
		echo "open files  soft $(ulimit -Sn), hard $(ulimit -Hn) per process"
		echo "ports       ephemeral $(tr '\t' '-' </proc/sys/net/ipv4/ip_local_port_range), somaxconn $(cat /proc/sys/net/core/somaxconn)"
	} | tee -a "$BENCH_RESULTS/versions.txt"
}

# start_ws_echo: the echo backend on a free port; sets ECHO_PORT, ECHO_PID.
start_ws_echo() {
	ECHO_PORT="$(free_port)"
	BENCH_SEQ=$((BENCH_SEQ + 1))
	spawn "ws-echo-$BENCH_SEQ" "$WS_ECHO" --listen "127.0.0.1:$ECHO_PORT" --lifetime 2h
	ECHO_PID=$SPAWNED_PID
	# shellcheck disable=SC2034 # read by the scripts that source this file
	ECHO_LOG="$BENCH_TMP/ws-echo-$BENCH_SEQ.log"
	wait_listen "$ECHO_PORT" "$ECHO_PID"
}

# start_ws_calmcache ECHO_PORT: calmcache with the seed-001 settings in front of
# the echo backend; sets PROXY_PORT, ADMIN_PORT, PROXY_PID, PROXY_CONFIG.
# max_connections: (hard open files limit - 256) / 2, the most that fits
# without calmcache's warning (each connection may hold an upstream one).
start_ws_calmcache() {
	local echo_port="$1" dir max_conn
	PROXY_PORT="$(free_port)"
	ADMIN_PORT="$(free_port)"
	BENCH_SEQ=$((BENCH_SEQ + 1))
	dir="$BENCH_TMP/calmcache-$BENCH_SEQ"
	mkdir -p "$dir"
	max_conn=$((($(ulimit -Hn) - 256) / 2))
	cat >"$dir/calmcache.toml" <<EOT
# seed 001 settings, as in the NGINX config of the same run
[server]
listen = ["127.0.0.1:$PROXY_PORT"]
threads = 0                  # one per core (NGINX worker_processes auto)
max_connections = $max_conn       # (hard open files limit - 256) / 2 (NGINX worker_connections)
backlog = 4096               # the NGINX listen backlog= of the same run
keepalive_timeout = "75s"    # NGINX keepalive_timeout 75s
keepalive_requests = 100     # NGINX keepalive_requests 100

[admin]
listen = "127.0.0.1:$ADMIN_PORT"

[upstreams.ws]
servers = ["127.0.0.1:$echo_port"]
keepalive = 32
connect_timeout = "60s"      # proxy_connect_timeout 60s
read_timeout = "60s"         # proxy_read_timeout 60s (a tunnel's idle limit)
send_timeout = "60s"         # proxy_send_timeout 60s

[[routes]]
upstream = "ws"
websocket = true
EOT
	PROXY_CONFIG="$dir/calmcache.toml"
	"$CALMCACHE" check --config "$PROXY_CONFIG" >"$PROXY_CONFIG.check" 2>&1 ||
		die "calmcache check refused $PROXY_CONFIG: $(cat "$PROXY_CONFIG.check")"
	start_calmcache_file "$PROXY_CONFIG"
}

# start_ws_nginx ECHO_PORT: NGINX with the seed-001 settings (worker_processes
# auto, worker_connections $NGINX_WORKER_CONNECTIONS or the hard open files
# limit, epoll, multi_accept, worker_rlimit_nofile = the hard limit, HTTP/1.1
# with the Upgrade/Connection headers, 60 s proxy timeouts, keepalive_timeout
# 75s, keepalive_requests 100); sets PROXY_PORT, PROXY_PID, PROXY_CONFIG.
# worker_connections counts both sides of a tunnel, per worker, and the
# workers do not share the connections evenly (no reuseport: with
# multi_accept one worker often takes most of a burst), so each worker is
# allowed as many as its descriptors; 10240 (2 x 10240 "enough" for 9,500
# tunnels by the seed's rule) makes the busiest worker refuse some.
start_ws_nginx() {
	local echo_port="$1" dir
	PROXY_PORT="$(free_port)"
	BENCH_SEQ=$((BENCH_SEQ + 1))
	dir="$BENCH_TMP/nginx-$BENCH_SEQ"
	mkdir -p "$dir/tmp"
	chmod 0755 "$dir" "$dir/tmp"
	cat >"$dir/nginx.conf" <<EOT
# seed 001 settings
worker_processes auto;
worker_rlimit_nofile $(ulimit -Hn);
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
    worker_connections ${NGINX_WORKER_CONNECTIONS:-$(ulimit -Hn)};
    use epoll;
    multi_accept on;
}
http {
    access_log off;
    keepalive_timeout 75s;
    keepalive_requests 100;
    proxy_connect_timeout 60s;
    proxy_read_timeout 60s;
    proxy_send_timeout 60s;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    map \$http_upgrade \$connection_upgrade {
        default upgrade;
        ''      close;
    }
    upstream ws {
        server 127.0.0.1:$echo_port;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$PROXY_PORT backlog=4096;
        location / {
            proxy_pass http://ws;
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_set_header Host \$host;
        }
    }
}
EOT
	PROXY_CONFIG="$dir/nginx.conf"
	# shellcheck disable=SC2034 # read by the scripts that source this file
	NGINX_ERROR_LOG="$dir/error.log"
	start_nginx_dir "nginx-$BENCH_SEQ" "$dir" "$PROXY_PORT"
	PROXY_PID=$SPAWNED_PID
}

# proxy_pids KIND: the proxy's processes (NGINX: the master and its workers).
proxy_pids() {
	echo "$PROXY_PID"
	if [[ "$1" == nginx* ]]; then
		ps -o pid= --ppid "$PROXY_PID" 2>/dev/null | tr -d ' ' || true
	fi
}

# sum_kb FIELD PID...: the sum of a /proc/PID/status field (kB) over PIDs.
sum_kb() {
	local field="$1" p v total=0
	shift
	for p in "$@"; do
		v="$(proc_kb "$p" "$field")"
		[[ "$v" =~ ^[0-9]+$ ]] && total=$((total + v))
	done
	echo "$total"
}

# cpu_ticks PID...: utime + stime (clock ticks) summed over PIDs.
cpu_ticks() {
	local p total=0 t
	for p in "$@"; do
		# fields after the ")" that closes comm: state is 1, utime 12, stime 13
		t="$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}')" || t=0
		total=$((total + ${t:-0}))
	done
	echo "$total"
}

# machine_busy_ticks: "busy total" ticks of all CPUs from /proc/stat (busy =
# user + nice + system: what processes run, so ours can be subtracted).
machine_busy_ticks() {
	head -1 /proc/stat | awk '{busy = $2 + $3 + $4; tot = 0; for (i = 2; i <= NF; i++) tot += $i; print busy, tot}'
}

# wait_quiet LABEL MAX_SECONDS: stop everything, then wait until the machine
# has been quiet (background CPU <= 10%) for three samples in a row, at most
# MAX_SECONDS; sets BG_CPU (the last sample) and warns when it gave up.
wait_quiet() {
	local label="$1" max="$2" start quiet=0 told=-60
	stop_all
	start=$SECONDS
	while :; do
		BG_CPU="$(background_cpu)"
		if ((BG_CPU <= 10)); then
			quiet=$((quiet + 1))
			((quiet >= 3)) && return 0
		else
			quiet=0
			if ((SECONDS - start >= max)); then
				log "WARNING: $label: ${BG_CPU}% of the CPUs busy with other work after waiting ${max}s: figures unreliable"
				return 0
			fi
			if ((SECONDS - told >= 60)); then
				log "$label: machine busy (${BG_CPU}% CPU by others), waiting up to ${max}s for it to quieten"
				told=$SECONDS
			fi
			sleep 2
		fi
	done
}

# ws_probe URL OUT: one client, 3 messages: the path works end to end.
ws_probe() {
	"$WS_CLIENTS" run --url "$1" --clients 1 --ramp-rate 100 --settle 0s --duration 0.6s \
		--interval 0.2s --drain 2s --connect-timeout 5s >"$2" 2>&1 || true
	[[ "$(grep '^{' "$2" | tail -1 | jq -r '.echoed' 2>/dev/null)" == 3 ]]
}

# fmt_mib KB: kB -> MiB with one decimal.
fmt_mib() { awk -v v="$1" 'BEGIN { if (v == "NA" || v == "") print "NA"; else printf "%.1f\n", v / 1024 }'; }
