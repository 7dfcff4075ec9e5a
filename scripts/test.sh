#!/usr/bin/env bash
# test.sh runs goccl's whole test suite; .ci/run runs exactly this, and the
# README names it. Steps, each fatal on failure:
#   1. system packages (scripts/install-deps.sh), gofmt, go vet
#   2. a build without cgo (the verbs stub) and its tests
#   3. go test on every package (ranks as goroutines over the in-memory and
#      TCP transports, real processes under gorun; collsim's CPU-bound
#      model fits run beside steps 6 and 7 instead), then again under the
#      race detector with -short (smaller tables, no process tests)
#   4. the GoMLX example module (examples/gomlx, its own go.mod): vet, tests
#   5. each fuzz target for a fixed number of inputs (FUZZTIME, default
#      10000x)
#   6. gorun across hosts (network namespaces + sshd), under Slurm and under
#      Open MPI's mpirun (scripts/gorun-integration.sh)
#   7. verbs on Soft-RoCE inside QEMU (scripts/softroce-test.sh), run
#      beside steps 4 to 6
# SKIP_INTEGRATION=1 skips step 6 and SKIP_VM=1 step 7 (for quick local
# runs); CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
# A count, not a duration: with a duration Go 1.26's fuzzing coordinator
# can fail a target with a bare "context deadline exceeded" when the
# deadline fires while a starved worker is mid-input (golang/go#75804,
# fixed in Go 1.27); CI lost runs to it twice on a loaded machine, even
# with a retry. A count has no deadline to race: a busy machine only
# makes the step slower (about a minute quiet).
FUZZTIME="${FUZZTIME:-10000x}"
# The targets that build a connected transport pair for every input (a few
# milliseconds each, 40 s of 10000 under load) take fewer; the decoders
# they drive have targets of their own at FUZZTIME.
FUZZTIME_PAIR="${FUZZTIME_PAIR:-3000x}"
step() { printf '\n=== %s (%s)\n' "$*" "$(date +%T)"; }

step "install system packages"
./scripts/install-deps.sh

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [[ -n "$unformatted" ]]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...
# Without cgo only these packages have other files (the verbs stub, the
# reference kernels' stub); the build without cgo below compiles the rest.
CGO_ENABLED=0 go vet ./bench/kernelref ./transport/verbs/...

step "build and test without cgo"
CGO_ENABLED=0 go build ./...
CGO_ENABLED=0 go test -count=1 ./transport/verbs/... ./transport/

# The Soft-RoCE VM (CPU-bound: QEMU emulates its two processors) runs in
# the background from here on, beside the go test steps and the rest
# (much of go test's time is waiting: stall steps, timeouts, late
# peers); its log is printed at the end. Started after the fuzz step it
# was the suite's tail by more than two minutes on a loaded machine
# (ci187: 3.7 min, the steps beside it 1.4); started after the race step
# still by 1.7 (ci189, 14.8 min in all beside three busy loops).
vm=0 vmpid=""
vmlog=$(mktemp)
trap 'rm -f "$vmlog"; [[ -n "$vmpid" ]] && kill "$vmpid" 2>/dev/null; true' EXIT
if [[ "${SKIP_VM:-0}" != 1 && -x scripts/softroce-test.sh ]]; then
	vm=1
fi
if [[ "$vm" == 1 && "${SKIP_INTEGRATION:-0}" != 1 ]]; then
	step "verbs on Soft-RoCE in QEMU"
	echo "started in the background, beside the steps that follow; its log is printed after them"
	./scripts/softroce-test.sh </dev/null >"$vmlog" 2>&1 &
	vmpid=$!
fi

# go test runs two packages at a time (-p is the number of CPUs), started
# in the order given: comm's tests, the longest (100 s of about 250 s in
# all), go first, so that they are not the run's tail alone. Most of
# comm's time is waiting (stall steps, timeouts, late peers: 40-60 s of
# CPU in 150 s), and its tests that only wait run in parallel
# (sideBySide): six at a time instead of two (the processors) took its
# 153 s to 125 (7 December; collectives' parallel tables are CPU-bound
# alike either way).
longest="./comm"
par="-parallel 6"

# collsim's full tests are CPU-bound model fits (a minute and a half of
# two idle cores, three beside three busy loops): they run in the
# background after the race step, beside the GoMLX, fuzzing, gorun and
# link-cut steps (started with the gorun step they were the suite's tail
# by two minutes beside three busy loops, ci195). Its -short tests run in
# the race step as before.
sim=./bench/cmd/collsim
step "go test (everything, full tables, real processes)"
go test -count=1 -timeout 15m $par $longest $(go list ./... | grep -v '/bench/cmd/collsim$')

# The race detector looks at goroutines sharing memory; these packages
# have none of their own to look at (schedule arithmetic, parsers, the
# pure-Go and assembly kernels, the examples' process tests that -short
# skips, benchmarks only), and raced they cost a link and a run each.
norace='/(bench|bench/cmd/osu|bench/cmd/peers|bench/cmd/tcpfloor|bench/kernelref|bench/plot|collectives/internal/kernels(/.*)?|collectives/simulate|examples/allreduce|examples/collcheck|examples/internal/(rankstats|mnistdata)|examples/soak|internal/affinity|internal/doccheck|internal/racetest)$'
raced=$(go list ./... | grep -Ev "^github.com/goccl/goccl$norace")

step "go test -race -short (every package with concurrency, smaller tables)"
go test -race -short -count=1 -timeout 15m $par $longest $raced

simpid=""
simlog=$(mktemp)
trap 'rm -f "$vmlog" "$simlog"; [[ -n "$vmpid" ]] && kill "$vmpid" 2>/dev/null; [[ -n "$simpid" ]] && kill "$simpid" 2>/dev/null; true' EXIT
if [[ "${SKIP_INTEGRATION:-0}" != 1 ]]; then
	step "collsim's model fits (go test $sim)"
	echo "started in the background, beside the next four steps; its log follows them"
	go test -count=1 -timeout 15m "$sim" </dev/null >"$simlog" 2>&1 &
	simpid=$!
else
	step "collsim's model fits (go test $sim)"
	go test -count=1 -timeout 15m "$sim"
fi

step "GoMLX example module (examples/gomlx)"
# A Go module of its own (goccl's go.mod never depends on GoMLX), so the
# ./... above does not reach it.
(cd examples/gomlx && go vet ./... && go test -count=1 -timeout 10m ./...)

step "fuzz targets, ${FUZZTIME} each"
fuzzlog=$(mktemp)
trap 'rm -f "$fuzzlog" "$vmlog" "$simlog"; [[ -n "$vmpid" ]] && kill "$vmpid" 2>/dev/null; [[ -n "$simpid" ]] && kill "$simpid" 2>/dev/null; true' EXIT
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		fuzztime=$FUZZTIME
		case "$target" in FuzzPeerRing | FuzzPeerStream) fuzztime=$FUZZTIME_PAIR ;; esac
		echo "--- fuzz $pkg $target ($fuzztime)"
		# A failing input is saved under testdata/fuzz and fails the run.
		# A failure of the fuzzing engine itself (a worker process that
		# died) saves nothing: that target runs once more, and fails the
		# run if it fails again.
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$fuzzlog" 2>&1; then
			tail -n 40 "$fuzzlog"
			if [[ -n "$(git status --porcelain --untracked-files=all -- "$dir/testdata/fuzz")" ]]; then
				echo "fuzz $target found a failing input (saved under $dir/testdata/fuzz)"; exit 1
			fi
			echo "fuzz $target: the engine failed without a failing input; running it again"
			go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$fuzzlog" 2>&1 || { tail -n 40 "$fuzzlog"; exit 1; }
		fi
		tail -n 3 "$fuzzlog"
	done
done

if [[ "${SKIP_INTEGRATION:-0}" != 1 ]]; then
	step "gorun: hosts over ssh in network namespaces, Slurm, Open MPI's mpirun"
	GORUN_INTEGRATION_STRICT=1 ./scripts/gorun-integration.sh
	step "a link cut mid-collective between network namespaces"
	LINKCUT_STRICT=1 ./scripts/linkcut-test.sh
fi

if [[ -n "$simpid" ]]; then
	step "collsim's model fits (go test $sim)"
	echo "the log of the run started above:"
	simrc=0
	wait "$simpid" || simrc=$?
	simpid=""
	cat "$simlog"
	if [[ "$simrc" != 0 ]]; then
		echo "collsim's tests: failed (exit $simrc)"; exit 1
	fi
fi

if [[ -n "$vmpid" ]]; then
	step "verbs on Soft-RoCE in QEMU"
	echo "the log of the run started above:"
	vmrc=0
	wait "$vmpid" || vmrc=$?
	vmpid=""
	cat "$vmlog"
	if [[ "$vmrc" != 0 ]]; then
		echo "verbs on Soft-RoCE: failed (exit $vmrc)"; exit 1
	fi
elif [[ "$vm" == 1 ]]; then
	step "verbs on Soft-RoCE in QEMU"
	./scripts/softroce-test.sh
fi
step "all tests passed"
