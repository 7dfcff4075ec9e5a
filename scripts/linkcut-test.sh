#!/usr/bin/env bash
# linkcut-test.sh: cut one host's network link in the middle of an allreduce
# loop across 4 real processes on 4 "hosts", and check that every rank
# fails within a bound instead of hanging (issue 8: failures surface fast on
# every rank).
#
# The hosts are network namespaces h0..h3 on 10.78.0.1-4/24, each joined by
# a veth pair to a bridge in a fifth namespace (the switch). Rank r of the
# examples/allreduce program runs in host r, started directly with the
# torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK=0,
# LOCAL_WORLD_SIZE=1, MASTER_ADDR/MASTER_PORT = host 0, where rank 0 hosts
# the bootstrap store), GOCCL_SECRET and GOCCL_TRANSPORT=tcp; goccl's
# defaults otherwise (TCP_USER_TIMEOUT 10 s, keepalive 5 s + 3 x 2 s, no
# collective timeout shorter than 10 minutes): the failure must be found by
# the library, not by an application timeout. Once every rank has joined
# and run for a moment, the switch side of host 2's veth is set down
# (`ip link set DEV down`: a cable pulled; nothing is closed or reset).
#
# Checks: every rank exits non-zero within BOUND seconds of the cut
# (LINKCUT_BOUND, default 20), and every rank but 2 says "rank 2 failed or
# lost its connection" (rank 2, cut off from everyone and from the store,
# may name anyone). It prints each rank's exit time and error.
#
# Needs root and iproute2; installs nothing. Without them it prints SKIP
# with the reason and exits 0 (LINKCUT_STRICT=1 makes a skip fail). Exit 1
# if a check failed. Namespaces, processes and files are removed on exit,
# also on failure or interruption. No traffic leaves the namespaces.
# 10.78.0.0/24 does not collide with scripts/gorun-integration.sh's
# 10.77.0.0/24, so both may run at once.
#
# Usage: scripts/linkcut-test.sh        (about 20 s; under a minute)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

N=4
CUT=2
BOUND="${LINKCUT_BOUND:-20}"
STRICT="${LINKCUT_STRICT:-0}"
NS="lc$$"
T=
pids=()

say() { printf '%s linkcut: %s\n' "$(date +%T)" "$*"; }
skip() {
	if [[ "$STRICT" == 1 ]]; then
		say "FAIL skipped ($*), and LINKCUT_STRICT=1"
		exit 1
	fi
	say "SKIP $*"
	exit 0
}
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
hostip() { echo "10.78.0.$(($1 + 1))"; }

cleanup() {
	local p i
	for p in "${pids[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	for i in $(seq 0 $((N - 1))); do
		# Whatever still runs in a host namespace was started by this script.
		p=$(ip netns pids "${NS}h$i" 2>/dev/null) && [[ -n "$p" ]] && kill -9 $p 2>/dev/null
		ip netns del "${NS}h$i" 2>/dev/null
	done
	ip netns del "${NS}sw" 2>/dev/null
	[[ -z "$T" || -n "${LINKCUT_KEEP:-}" ]] || rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$(date +%s%N)
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "needs iproute2 (ip)"
command -v go >/dev/null || skip "needs go to build examples/allreduce"
ip netns add "${NS}sw" 2>/dev/null || skip "cannot create a network namespace (ip netns add)"

T=$(mktemp -d /tmp/linkcut.XXXXXX)
go build -o "$T/allreduce" ./examples/allreduce || { say "FAIL build examples/allreduce"; exit 1; }

# The switch and the hosts.
up() {
	ip -n "${NS}sw" link add br0 type bridge && ip -n "${NS}sw" link set br0 up || return 1
	local i
	for i in $(seq 0 $((N - 1))); do
		ip netns add "${NS}h$i" &&
			ip -n "${NS}h$i" link set lo up &&
			ip link add "eth$i" netns "${NS}h$i" type veth peer name "p$i" netns "${NS}sw" &&
			ip -n "${NS}sw" link set "p$i" master br0 &&
			ip -n "${NS}sw" link set "p$i" up &&
			ip -n "${NS}h$i" addr add "$(hostip "$i")/24" dev "eth$i" &&
			ip -n "${NS}h$i" link set "eth$i" up || return 1
	done
}
up || skip "cannot build the namespaces and veth links (see the ip error above)"

secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
for r in $(seq 0 $((N - 1))); do
	# Created here, not by the background job's redirections, so that the
	# checks below never read a file that does not exist yet.
	: >"$T/out$r"
	: >"$T/err$r"
	ip netns exec "${NS}h$r" env RANK="$r" WORLD_SIZE="$N" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
		MASTER_ADDR="$(hostip 0)" MASTER_PORT=29478 GOCCL_SECRET="$secret" GOCCL_TRANSPORT=tcp \
		GOCCL_INIT_TIMEOUT=20s \
		"$T/allreduce" -v -count 262144 -iters 100000000 >"$T/out$r" 2>"$T/err$r" &
	pids+=($!)
done

# Wait until every rank has joined (-v prints "rank R pid P joined").
end=$((SECONDS + 20))
for r in $(seq 0 $((N - 1))); do
	until grep -qs "^rank $r pid [0-9]* joined" "$T/out$r"; do
		if ((SECONDS >= end)) || ! kill -0 "${pids[r]}" 2>/dev/null; then
			say "FAIL rank $r did not join within 20 s"
			for q in $(seq 0 $((N - 1))); do sed "s/^/  rank $q: /" "$T/err$q"; done
			exit 1
		fi
		sleep 0.05
	done
done
say "4 ranks joined after $(ms "$start") ms; cutting host $CUT's link in 1 s"
sleep 1
for r in $(seq 0 $((N - 1))); do
	kill -0 "${pids[r]}" 2>/dev/null || { say "FAIL rank $r ended before the cut: $(cat "$T/err$r")"; exit 1; }
done

cut=$(date +%s%N)
ip -n "${NS}sw" link set "p$CUT" down || { say "FAIL ip link set p$CUT down"; exit 1; }

# Wait for every rank, at most BOUND seconds plus 10 s of grace (so a slow
# failure is measured rather than only flagged), then kill what is left.
declare -A took code
left=$N
deadline=$((BOUND * 1000 + 10000))
while ((left > 0)); do
	for r in $(seq 0 $((N - 1))); do
		[[ -n "${took[$r]:-}" ]] && continue
		if ! kill -0 "${pids[r]}" 2>/dev/null; then
			took[$r]=$(ms "$cut")
			wait "${pids[r]}"
			code[$r]=$?
			left=$((left - 1))
		fi
	done
	((left > 0)) || break
	if (($(ms "$cut") > deadline)); then
		for r in $(seq 0 $((N - 1))); do
			[[ -n "${took[$r]:-}" ]] && continue
			kill -9 "${pids[r]}" 2>/dev/null
			wait "${pids[r]}" 2>/dev/null
			took[$r]=hang code[$r]=killed
		done
		break
	fi
	sleep 0.05
done

failed=0
check() { # rank message...
	local r=$1
	shift
	say "FAIL rank $r: $*"
	failed=1
}
for r in $(seq 0 $((N - 1))); do
	err=$(grep -v '^$' "$T/err$r" | tail -n 3)
	if [[ "${took[$r]}" == hang ]]; then
		check "$r" "still running $((deadline / 1000)) s after the cut (killed)"
	elif [[ "${code[$r]}" == 0 ]]; then
		check "$r" "exited 0 after the cut"
	elif ((took[$r] > BOUND * 1000)); then
		check "$r" "exited ${code[$r]} after ${took[$r]} ms, bound ${BOUND} s"
	elif ((r != CUT)) && ! grep -q "rank $CUT failed or lost its connection" "$T/err$r"; then
		check "$r" "error does not name rank $CUT"
	else
		say "rank $r exited ${code[$r]} after ${took[$r]} ms"
	fi
	printf '  rank %d: %s\n' "$r" "${err:-(no error output)}"
done
if ((failed)); then
	say "FAIL after $(ms "$start") ms in all"
	exit 1
fi
say "PASS every rank failed within ${BOUND} s of host $CUT's link going down; $(ms "$start") ms in all"
