#!/usr/bin/env bash
# gorun-integration.sh: gorun and goccl's bootstrap with real launchers and
# real "hosts", on one machine. It needs root (network namespaces, daemons)
# and installs what it lacks (openssh-server, slurm-wlm, munge, openmpi-bin)
# with apt-get on Debian. Parts:
#
#   hosts   4 hosts as network namespaces (10.77.0.1-4 on a bridge in a 5th
#           namespace; nothing outside them), an sshd in each, and:
#           the allreduce example across them with gorun -H (4 and 8 ranks);
#           collcheck on 2 hosts of 3 ranks (shared memory within a host,
#           TCP between: every collective and algorithm, the hierarchical
#           ones included, verified);
#           SIGKILL of a remote rank mid-run (gorun exits non-zero within
#           5 s naming it, no rank left anywhere); the ssh link of a rank
#           cut (the remote rank is stopped by its wrapper); SIGINT to gorun
#           forwarded to every rank.
#   local   SIGKILL of a local rank of the example mid-run, same checks.
#   slurm   munged, slurmctld and slurmd started here with a private
#           configuration (SLURM_CONF). One node: srun -n 4 of the example
#           without gorun, gorun inside salloc, gorun -n 4 inside an sbatch
#           job of 1 CPU (srun --overcommit), a failing rank, SIGINT. Then 4
#           nodes in namespaces: srun -N 4 -n 4 without gorun, gorun inside
#           salloc -N 4 -n 8 (placement, allreduce) and sbatch -N 4.
#   mpirun  the example under Open MPI's mpirun -np 2, without gorun.
#
# Usage: scripts/gorun-integration.sh [part...]   (default: all parts)
#
# A part that cannot run here (not root, no namespaces, a package that does
# not install) prints SKIP with the reason; GORUN_INTEGRATION_STRICT=1 makes
# a skip fail. Each check prints PASS or FAIL with its time; the script
# exits 1 if any check failed. Everything it creates (namespaces, daemons,
# processes, files under one temporary directory) is removed on exit, also
# on failure or interruption. No traffic leaves loopback and the namespaces.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

parts=("$@")
((${#parts[@]})) || parts=(hosts local slurm mpirun)
STRICT="${GORUN_INTEGRATION_STRICT:-0}"
pass=0 fail=0 skip=0
T=$(mktemp -d /tmp/gorun-it.XXXXXX)
chmod 0711 "$T"
NS="gorun$$"      # namespace prefix, unique per run
cleanup_fns=()

say() { printf '%s gorun-integration: %s\n' "$(date +%T)" "$*"; }
ok() { pass=$((pass + 1)); say "PASS $*"; }
bad() { fail=$((fail + 1)); say "FAIL $*"; }
skipped() {
	if [[ "$STRICT" == 1 ]]; then bad "$* (skipped, and GORUN_INTEGRATION_STRICT=1)"; return; fi
	skip=$((skip + 1)); say "SKIP $*"
}
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

cleanup() {
	local i
	for ((i = ${#cleanup_fns[@]} - 1; i >= 0; i--)); do
		"${cleanup_fns[i]}" >/dev/null 2>&1 || true
	done
	[[ -n "${GORUN_IT_KEEP:-}" ]] || rm -rf "$T"
}
trap cleanup EXIT
# Interrupted (a CI job cancelled, timeout(1)): say so, not "done", and
# clean up. The signal often reaches the Slurm daemons too (the same
# process group), after which a Slurm client would retry for minutes:
# every client and launcher here runs under timeout -k, so the command
# the script waits on ends within its bound and the trap runs.
# The message goes to fd 9, a copy of the script's standard output: a trap
# runs where the signal is handled, which may be inside a function call
# whose output is redirected to a check's file (slurm_client ... >file),
# and that file is gone with the rest at cleanup.
exec 9>&1
trap 'say "interrupted by SIGINT: $pass passed, $fail failed, $skip skipped so far" >&9; exit 130' INT
trap 'say "interrupted by SIGTERM: $pass passed, $fail failed, $skip skipped so far" >&9; exit 143' TERM

# pids_of EXE: the pids of processes running the file EXE, anywhere. The
# test is bash's own (same device and inode), not a readlink process per
# entry of /proc: scanning every 0.1 s, that was hundreds of forks a scan,
# seconds of each wait and most of this script's CPU time.
pids_of() {
	local p out=()
	for p in /proc/[0-9]*; do
		[[ "$p/exe" -ef "$1" ]] 2>/dev/null && out+=("${p#/proc/}")
	done
	echo "${out[@]}"
}

# wait_gone EXE SECONDS: wait until no process runs EXE; kill leftovers.
wait_gone() {
	local end=$((SECONDS + $2)) left
	while left=$(pids_of "$1"); [[ -n "$left" ]]; do
		if ((SECONDS >= end)); then
			kill -9 $left 2>/dev/null
			echo "$left"
			return 1
		fi
		sleep 0.1
	done
}

# wait_count EXE N SECONDS: wait until N processes run EXE.
wait_count() {
	local end=$((SECONDS + $3)) n
	while n=$(pids_of "$1" | wc -w); ((n < $2)); do
		((SECONDS >= end)) && return 1
		sleep 0.1
	done
}

# apt_get ARGS...: apt-get, one at a time with the project's other scripts
# (the Soft-RoCE step installs its packages beside this one in .ci/run),
# and waiting for any other holder of dpkg's lock rather than failing.
apt_get() {
	flock -w 900 /tmp/goccl-apt.lock apt-get -o DPkg::Lock::Timeout=900 "$@"
}

install_pkgs() { # package...
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]})) || return 0
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n1)" ]]; then
		apt_get update -qq >/dev/null 2>&1 || return 1
	fi
	apt_get install -y -qq --no-install-recommends "${missing[@]}" >"$T/apt.log" 2>&1 || { tail -5 "$T/apt.log"; return 1; }
}

build() {
	go build -o "$T/gorun" ./cmd/gorun && go build -o "$T/allreduce" ./examples/allreduce && go build -o "$T/collcheck" ./examples/collcheck
}

# check_allreduce FILE RANKS: the example's verified line is in FILE.
check_allreduce() {
	grep -q "over $2 ranks via .*: verified on every rank" "$1"
}

source scripts/gorun-integration-hosts.sh
source scripts/gorun-integration-slurm.sh

if ((EUID != 0)); then
	skipped "all parts: not root (namespaces, daemons and packages need root)"
	say "done: $pass passed, $fail failed, $skip skipped"
	((fail == 0))
	exit
fi
say "building gorun and the allreduce example"
if ! build; then
	bad "build"
	exit 1
fi
for part in "${parts[@]}"; do
	case "$part" in
	hosts) part_hosts ;;
	local) part_local ;;
	slurm) part_slurm ;;
	mpirun) part_mpirun ;;
	*) bad "unknown part $part" ;;
	esac
done
say "done: $pass passed, $fail failed, $skip skipped"
((fail == 0))
