# shellcheck shell=bash
# bench/stampede --profile sus-grid (issue 12, item 10): refresh = "sus" alone
# (no stale_while_revalidate) over a grid of TTLs x request rates, next to
# NGINX's best configuration. Sourced by bench/stampede after its set-up
# (lib.sh, options, build); see `bench/stampede --help` for what it measures.

# grid_list CSV ALLOWED...: the CSV items, each checked against ALLOWED.
grid_list() {
	local csv="$1" v
	shift
	for v in ${csv//,/ }; do
		[[ " $* " == *" $v "* ]] || die "$v is not in the grid (choose from: $*)"
		echo "$v"
	done
}

# grid_cell_secs TTL: measured seconds of a cell.
grid_cell_secs() {
	awk -v t="$1" -v q="$GRID_QUICK" 'BEGIN {
		if (q) { m = 3; l = t + 2 } else { m = 6; l = 2 * t }
		v = (l > m ? l : m); printf "%d\n", (v == int(v) ? v : int(v) + 1) }'
}

# grid_row ROW TTL RATE SECS RAW: one cell of one proxy.
grid_row() {
	local row="$1" ttl="$2" rate="$3" secs="$4" raw="$5" cc_ttl windows tag out rc=0
	cc_ttl="$(awk -v t="$ttl" 'BEGIN {v = (t == int(t) ? t : int(t) + 1); print v}')"
	check_quiet "sus-grid ttl $ttl rate $rate $row"
	start_origin --sleep-ms 100 --workers 64 --cpu-ms 0 --cache-control "max-age=$cc_ttl"
	case "$row" in
	calm-sus)
		start_calmcache "$ORIGIN_PORT" "ttl = { 200 = \"${ttl}s\" }
override_origin = true
refresh = \"sus\"
stale_while_revalidate = \"0s\"
stale_if_error = \"0s\"
lock_timeout = \"5s\""
		windows="$(awk -v d=$((WARMUP + secs)) -v t="$ttl" 'BEGIN {printf "%d\n", int(d / t + 1e-9)}')"
		;;
	nginx-best)
		start_nginx honorbg "$ORIGIN_PORT"
		windows="$(((WARMUP + secs) / cc_ttl))"
		;;
	esac
	tag="ttl${ttl}-${rate}rps-$row"
	cp "$PROXY_CONFIG" "$BENCH_RESULTS/grid-$tag.conf"
	URL="http://127.0.0.1:$PROXY_PORT$HOT"
	curl -s -m 10 -o /dev/null -f "$URL" || die "$row: fill request failed"
	wait_origin_idle
	origin_reset
	out="$BENCH_RESULTS/grid-loadgen-$tag.json"
	run_bounded $((WARMUP + secs + 30)) "$out" "$LOADGEN" --url "$URL" --rps "$rate" --duration "${secs}s" \
		--warmup "${WARMUP}s" --connections 256 --miss-threshold-ms "$THRESHOLD_MS" --json || rc=$?
	((rc == 0)) || log "loadgen exited with $rc (see $out)"
	local fetches j req waited hits err
	fetches="$(origin_requests)"
	[[ "$row" == calm-* ]] && calm_status >"$BENCH_RESULTS/grid-status-$tag.json"
	j="$(grep '^{' "$out" | tail -1 || true)"
	req="$(json_num requests <<<"$j")" waited="$(json_num waited <<<"$j")" hits="$(json_num hits <<<"$j")" err="$(json_num errors <<<"$j")"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$ttl" "$rate" "$row" "$secs" "${req:-NA}" "${waited:-NA}" \
		"$(awk -v r="${req:-0}" -v h="${hits:-0}" 'BEGIN {print r - h}')" "${fetches:-NA}" "$windows" "${err:-NA}" "$BG_CPU" >>"$raw"
	log "ttl ${ttl}s ${rate} req/s $(printf '%-10s' "$row") waited ${waited:-NA}/${req:-NA}, not-hit $((${req:-0} - ${hits:-0})), fetches ${fetches:-NA} over $windows lifetimes, errors ${err:-NA}"
	stop_all
}

sus_grid() {
	local ttls rates raw ttl rate row secs total=0
	mapfile -t ttls < <(grid_list "$GRID_TTLS" 0.1 0.5 1 3 30)
	mapfile -t rates < <(grid_list "$GRID_RATES" 1 10 100 1000)
	raw="$BENCH_RESULTS/grid-raw.tsv"
	printf 'ttl_s\trate\trow\tsecs\trequests\twaited\tnot_hit\tfetches\tlifetimes\terrors\tbg_cpu\n' >"$raw"
	for ttl in "${ttls[@]}"; do total=$((total + ${#rates[@]} * 2 * ($(grid_cell_secs "$ttl") + WARMUP + 2))); done
	echo
	echo "## sus-grid: refresh = \"sus\" alone vs NGINX lock + use_stale updating + background_update;"
	echo "## origin --sleep-ms 100 --workers 64 --cpu-ms 0 --cache-control max-age=ceil(TTL); loadgen open loop, ${WARMUP}s warm-up;"
	echo "## $((${#ttls[@]} * ${#rates[@]})) cells x 2 proxies, about $(((total + 59) / 60)) min"
	for ttl in "${ttls[@]}"; do
		secs="$(grid_cell_secs "$ttl")"
		for rate in "${rates[@]}"; do
			# calmcache and NGINX alternate; the order flips every cell.
			local order=(calm-sus nginx-best)
			[[ $(((${#rate} + ${#ttl}) % 2)) == 1 ]] && order=(nginx-best calm-sus)
			for row in "${order[@]}"; do grid_row "$row" "$ttl" "$rate" "$secs" "$raw"; done
		done
	done
	stop_all

	# cell TTL RATE ROW: "waited/requests", "not-hit", "fetches/lifetimes=ratio".
	cellv() { awk -F'\t' -v t="$1" -v r="$2" -v w="$3" -v c="$4" 'NR > 1 && $1 == t && $2 == r && $3 == w {print $c}' "$raw"; }
	local hdr
	hdr="$(printf '%-8s' TTL; for rate in "${rates[@]}"; do printf ' | %-27s' "$rate req/s: calm / NGINX"; done)"
	echo
	echo "### client requests that waited on the origin: latency > ${THRESHOLD_MS} ms (requests measured in brackets)"
	echo "$hdr"
	for ttl in "${ttls[@]}"; do
		printf '%-8s' "${ttl} s"
		for rate in "${rates[@]}"; do
			printf ' | %-27s' "$(cellv "$ttl" "$rate" calm-sus 6) / $(cellv "$ttl" "$rate" nginx-best 6) ($(cellv "$ttl" "$rate" calm-sus 5))"
		done
		printf '\n'
	done
	echo
	echo "### answers the proxy itself marks as not served from cache (Cache-Status without hit; NGINX X-Cache-Status MISS/EXPIRED/...)"
	echo "$hdr"
	for ttl in "${ttls[@]}"; do
		printf '%-8s' "${ttl} s"
		for rate in "${rates[@]}"; do
			printf ' | %-27s' "$(cellv "$ttl" "$rate" calm-sus 7) / $(cellv "$ttl" "$rate" nginx-best 7)"
		done
		printf '\n'
	done
	echo
	echo "### origin fetches per object lifetime: fetches / expiries during warm-up + run (floor(time / TTL); NGINX: its whole-second TTL)"
	echo "$hdr"
	for ttl in "${ttls[@]}"; do
		printf '%-8s' "${ttl} s"
		for rate in "${rates[@]}"; do
			local a b
			a="$(awk -v f="$(cellv "$ttl" "$rate" calm-sus 8)" -v l="$(cellv "$ttl" "$rate" calm-sus 9)" 'BEGIN {if (l > 0 && f != "NA") printf "%.2f (%d/%d)", f / l, f, l; else print "NA"}')"
			b="$(awk -v f="$(cellv "$ttl" "$rate" nginx-best 8)" -v l="$(cellv "$ttl" "$rate" nginx-best 9)" 'BEGIN {if (l > 0 && f != "NA") printf "%.2f (%d/%d)", f / l, f, l; else print "NA"}')"
			printf ' | %-27s' "$a / $b"
		done
		printf '\n'
	done
	echo
	echo "errors (any cell): calmcache $(awk -F'\t' 'NR > 1 && $3 == "calm-sus" {e += $10} END {print e + 0}' "$raw"), NGINX $(awk -F'\t' 'NR > 1 && $3 == "nginx-best" {e += $10} END {print e + 0}' "$raw")"
	echo "goal (issue 12 item 10): 0 waited in every cell, ~1 fetch per lifetime where requests come more often than the TTL;"
	echo "where they come less often (1 req/s at TTL < 1 s) a request finds the object expired for longer than the gap since the"
	echo "last one, so only a stale window that long can spare it the origin"
	warn_if_noisy "$raw" 11
	echo "raw results: $raw (loadgen JSON, configs, /status per cell alongside)"
}
