#!/usr/bin/env bash
# noverbs-host-test.sh checks that goccl builds without rdma-core's headers
# and runs without libibverbs: in a private mount namespace it hides
# /usr/include/infiniband, every libibverbs.so.1 and the provider
# directory, then
#
#   1. builds every package with cgo, every cgo package compiled afresh
#      (CGO_CFLAGS changed so that no cached object is reused; this takes a
#      minute or two);
#   2. checks that the binaries do not link libibverbs (ldd);
#   3. runs `gorun -n 2 allreduce`, which must use TCP and say on stderr
#      that libibverbs.so.1 could not be loaded, and
#      GOCCL_TRANSPORT=verbs, which must fail saying the same;
#   4. runs the verbs tests: the fake-backed ones pass, the ABI check skips
#      for want of headers, the device ones skip for want of a device.
#
#   scripts/noverbs-host-test.sh
#
# It needs root (or CAP_SYS_ADMIN) for unshare -m; without it, it says so
# and exits 0 with "SKIP" (it is a check of the environment, not of code
# that could be broken in a way only it sees). It prints PASS or FAIL last.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "noverbs-host-test: $*" >&2; }

if [[ "${GOCCL_NOVERBS_INNER:-}" != 1 ]]; then
	if ! unshare -m --propagation private true 2>/dev/null; then
		log "SKIP: cannot create a mount namespace (unshare -m needs root or CAP_SYS_ADMIN)"
		echo "noverbs-host-test: SKIP"
		exit 0
	fi
	exec env GOCCL_NOVERBS_INNER=1 unshare -m --propagation private "$0" "$@"
fi

# Inside the namespace: hide the headers, the library and the providers.
hidden=()
empty=$(mktemp)
if [[ -d /usr/include/infiniband ]]; then
	mount -t tmpfs -o ro,size=4k none /usr/include/infiniband
	hidden+=(/usr/include/infiniband)
fi
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu; do
	for f in "$d"/libibverbs.so*; do
		[[ -e "$f" ]] || continue
		real=$(readlink -f "$f")
		if ! mountpoint -q "$real" 2>/dev/null; then
			mount --bind "$empty" "$real"
			hidden+=("$real")
		fi
	done
	if [[ -d "$d/libibverbs" ]]; then
		mount -t tmpfs -o ro,size=4k none "$d/libibverbs"
		hidden+=("$d/libibverbs")
	fi
done
log "hidden: ${hidden[*]:-nothing (not installed)}"
[[ ! -e /usr/include/infiniband/verbs.h ]] || { log "verbs.h still visible"; exit 1; }

fail=0
check() { # name, command...: run, report
	local name=$1
	shift
	if "$@"; then log "ok: $name"; else log "FAILED: $name"; fail=1; fi
}

cd "$top"
work=$(mktemp -d "${TMPDIR:-/tmp}/goccl-noverbs.XXXXXX")
trap 'rm -rf "$work" "$empty"' EXIT
export CGO_ENABLED=1
# A flag no other build has used: every cgo package is compiled again, here,
# without the headers (Go's build cache does not key on system headers, so
# an object built elsewhere with them would otherwise be reused).
export CGO_CFLAGS="-O2 -g -DGOCCL_NOVERBS_HOST_TEST=$(date +%s%N)"

check "go build ./... with cgo, without rdma-core headers" go build ./...
check "build gorun and allreduce" go build -o "$work/" ./cmd/gorun ./examples/allreduce

no_libibverbs() {
	! grep -q libibverbs <<<"$(ldd "$work/allreduce")"
}
check "allreduce does not link libibverbs" no_libibverbs

run_tcp() {
	"$work/gorun" -n 2 "$work/allreduce" -count 4099 -iters 2 >"$work/out" 2>"$work/err" || {
		cat "$work/out" "$work/err" >&2
		return 1
	}
	cat "$work/out" "$work/err" | sed 's/^/    /' >&2
	grep -q 'via tcp: verified on every rank' "$work/out" &&
		grep -q 'transport tcp (GOCCL_TRANSPORT=auto: verbs: libibverbs.so.1 not loaded' "$work/err"
}
check "gorun -n 2 allreduce runs over TCP and says why verbs is off" run_tcp

run_verbs() {
	if GOCCL_TRANSPORT=verbs "$work/gorun" -n 2 "$work/allreduce" -count 16 -iters 1 >"$work/out" 2>&1; then
		cat "$work/out" >&2
		return 1
	fi
	grep -m1 'libibverbs.so.1 not loaded' "$work/out" | sed 's/^/    /' >&2
}
check "GOCCL_TRANSPORT=verbs fails, saying libibverbs.so.1 is missing" run_verbs

run_tests() {
	go test -count=1 -v ./transport/verbs/... >"$work/test" 2>&1 || {
		tail -n 40 "$work/test" >&2
		return 1
	}
	local pass skip
	pass=$(grep -c -- '--- PASS' "$work/test" || true)
	skip=$(grep -c -- '--- SKIP' "$work/test" || true)
	log "verbs tests: $pass passed, $skip skipped (device and header checks), 0 failed"
	grep -q -- '--- PASS: TestConformanceFake ' "$work/test" &&
		grep -q -- '--- SKIP: TestABIMatchesHeaders' "$work/test"
}
check "go test ./transport/verbs/... passes on the fake" run_tests

if ((fail)); then
	echo "noverbs-host-test: FAIL"
	exit 1
fi
echo "noverbs-host-test: PASS"
