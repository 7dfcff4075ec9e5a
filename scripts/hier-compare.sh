#!/usr/bin/env bash
# hier-compare.sh: hierarchical against flat collectives across hosts, on
# this machine: hosts are network namespaces on a bridge whose links are
# shaped with tc tbf (as scripts/sim-validate.sh; ../shared/notes/
# multihost.md), ranks of one host talk over shared memory, hosts over TCP
# (GOCCL_TRANSPORT=auto), gorun starts the ranks through an ssh stand-in
# (ip netns exec). For each layout (hosts x ranks per host) it runs osu
# allreduce (or --op OP) with each algorithm forced (ring,
# recursive-doubling, tree, hier-ring, hier-leader; or --algos LIST) and
# with the selector's choice ("auto"), results checked (-c), and prints one
# markdown table of average latency per size (--max: the slowest rank's,
# which for a rooted collective is when the root's result is whole).
#
# Usage: sudo scripts/hier-compare.sh [-o DIR] [--rate 1gbit] [--layouts "2x2 2x3 4x2"] [-m 8:4M] [-i 20]
#        [--op reduce --algos "pipeline ring binomial auto"] [--max]
# Needs root (namespaces, tc). Not part of the test suite: a measurement,
# meant for a quiet machine. Everything it creates is removed on exit.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

OUT=/tmp/hier-compare
RATE=1gbit
LAYOUTS="2x2 2x3 4x2"
SIZES=8:4M
ITERS=20
OP=allreduce
COL=2
FULL=()
ALGOS="ring recursive-doubling tree hier-ring hier-leader auto"
while (($#)); do
	case $1 in
	-o) OUT=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--layouts) LAYOUTS=$2; shift 2 ;;
	-m) SIZES=$2; shift 2 ;;
	-i) ITERS=$2; shift 2 ;;
	--op) OP=$2; shift 2 ;;
	--algos) ALGOS=$2; shift 2 ;;
	--max) COL=4 FULL=(-f); shift ;;
	*) echo "usage: $0 [-o DIR] [--rate 1gbit] [--layouts \"2x2 2x3 4x2\"] [-m 8:4M] [-i 20] [--op OP] [--algos LIST] [--max]" >&2; exit 2 ;;
	esac
done

say() { printf '%s hier-compare: %s\n' "$(date +%T)" "$*" >&2; }
die() { say "$*"; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (network namespaces, tc)"
mkdir -p "$OUT/bin" "$OUT/runs" || die "cannot create $OUT"
BIN=$(cd "$OUT/bin" && pwd)
say "building gorun and osu into $BIN"
go build -o "$BIN/" ./cmd/gorun ./bench/cmd/osu || die "build failed"

NS="hierc$$"
NHOSTS=4
hostip() { echo "10.81.0.$(($1 + 1))"; }
ns_down() {
	local i pid
	for i in $(seq 0 $((NHOSTS - 1))); do
		pid=$(ip netns pids "${NS}h$i" 2>/dev/null) && [[ -n "$pid" ]] && kill -9 $pid 2>/dev/null
		ip netns del "${NS}h$i" 2>/dev/null
	done
	ip netns del "${NS}sw" 2>/dev/null
}
trap ns_down EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ns_up() {
	local i
	ip netns add "${NS}sw" && ip -n "${NS}sw" link add br0 type bridge && ip -n "${NS}sw" link set br0 up || return 1
	for i in $(seq 0 $((NHOSTS - 1))); do
		ip netns add "${NS}h$i" &&
			ip -n "${NS}h$i" link set lo up &&
			ip link add "eth$i" netns "${NS}h$i" type veth peer name "p$i" netns "${NS}sw" &&
			ip -n "${NS}sw" link set "p$i" master br0 &&
			ip -n "${NS}sw" link set "p$i" up &&
			ip -n "${NS}h$i" addr add "$(hostip "$i")/24" dev "eth$i" &&
			ip -n "${NS}h$i" link set "eth$i" up &&
			ip netns exec "${NS}h$i" tc qdisc replace dev "eth$i" root tbf rate "$RATE" burst 256kb latency 10ms &&
			ip netns exec "${NS}sw" tc qdisc replace dev "p$i" root tbf rate "$RATE" burst 256kb latency 10ms || return 1
	done
}
say "creating $NHOSTS hosts, links shaped to $RATE"
ns_up || die "cannot create the namespaces"

# The ssh stand-in: "ssh [options] HOST COMMAND" runs COMMAND in HOST's
# namespace.
cat >"$BIN/nsssh" <<'EOS'
#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in
	-o | -p | -i | -l | -F) shift 2 ;;
	-*) shift ;;
	*) break ;;
	esac
done
host=$1
shift
exec ip netns exec "${HIERC_NS}h$((${host##*.} - 1))" sh -c "$*"
EOS
chmod +x "$BIN/nsssh"
export HIERC_NS=$NS GOCCL_TRANSPORT=auto

hostspec() {
	local i out=()
	for i in $(seq 0 $(($1 - 1))); do out+=("$(hostip "$i"):$2"); done
	local IFS=,
	echo "${out[*]}"
}

failed=0
for layout in $LAYOUTS; do
	h=${layout%x*} r=${layout#*x}
	for algo in $ALGOS; do
		file="$OUT/runs/$layout-$algo.txt"
		opt=(--algorithm "$algo")
		[[ $algo == auto ]] && opt=()
		say "$layout: osu $OP ${opt[*]:-(selector)} -m $SIZES -i $ITERS -c"
		if ! ip netns exec "${NS}h0" timeout 600 "$BIN/gorun" --ssh "$BIN/nsssh" --timeout 550s \
			-H "$(hostspec "$h" "$r")" "$BIN/osu" "$OP" "${opt[@]}" "${FULL[@]}" -m "$SIZES" -i "$ITERS" -x 5 -c \
			>"$file" 2>"$file.err"; then
			say "FAILED: $layout $algo: $(tail -n 3 "$file.err" | tr '\n' ' ')"
			failed=1
		fi
	done
done
ns_down
trap - EXIT

# One table: size, then each algorithm's average latency (us).
for layout in $LAYOUTS; do
	printf '\n### %s %s (hosts x ranks per host), links %s\n\n| size (B) |' "$OP" "$layout" "$RATE"
	for algo in $ALGOS; do printf ' %s |' "$algo"; done
	printf '\n|---|'
	for algo in $ALGOS; do printf -- '---|'; done
	printf '\n'
	first=${ALGOS%% *}
	sizes=$(sed 's/^\[[0-9]*\] //' "$OUT/runs/$layout-$first.txt" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1}')
	for s in $sizes; do
		printf '| %s |' "$s"
		for algo in $ALGOS; do
			v=$(sed 's/^\[[0-9]*\] //' "$OUT/runs/$layout-$algo.txt" 2>/dev/null | awk -v s="$s" -v c="$COL" '$1 == s {print $c; exit}')
			printf ' %s |' "${v:--}"
		done
		printf '\n'
	done
done
exit $failed
