# gorun-integration-slurm.sh: the "slurm" and "mpirun" parts of
# scripts/gorun-integration.sh, which sources this file (it uses that
# script's variables and helpers: T, ok, bad, skipped, cleanup_fns, ...).
#
# Slurm runs twice: as one node (this host, 4 CPUs), then, when network
# namespaces work, as 4 nodes n0-n3 in the namespaces of the hosts part
# (slurmctld and slurmd n0 in h0, slurmd nN in hN, each with its own UTS
# namespace so that its host name is nN). Each time with a private
# configuration: SLURM_CONF points the daemons and the clients at
# $T/slurm/slurm.conf, munged uses its own key and
# socket under $T, the ports are picked per run, and nothing in /etc is
# touched. The daemons run in the foreground of background jobs, so that
# their pids are known and cleanup kills exactly them.

slurm_down() {
	local pid p
	if [[ -n "${SLURM_CONF:-}" ]]; then
		slurm_client timeout -k 5 5 scancel --quiet --user=root 2>/dev/null
		local end=$((SECONDS + 3))
		while [[ -n "$(slurm_client timeout -k 5 2 squeue -h 2>/dev/null)" ]] && ((SECONDS < end)); do sleep 0.2; done
	fi
	for pid in "${SLURM_PIDS[@]}"; do
		kill "$pid" 2>/dev/null
	done
	sleep 0.5
	for pid in "${SLURM_PIDS[@]}"; do
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	SLURM_PIDS=()
	# slurmd runs in $T/slurm and its step daemons and tasks inherit that
	# directory: whatever still runs there is this script's.
	for p in /proc/[0-9]*; do
		[[ "$(readlink "$p/cwd" 2>/dev/null)" == "$T/slurm"* ]] && kill -9 "${p#/proc/}" 2>/dev/null
	done
	unset SLURM_CONF
}

# slurm_up one|multi: munged, slurmctld and the slurmds.
slurm_up() {
	local d="$T/slurm" node i nodes
	node=$(hostname)
	SLURM_PIDS=()
	cleanup_fns+=(slurm_down)
	rm -rf "$d"
	mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/home" && chmod 0711 "$d/munge" || return 1
	dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none && chmod 0600 "$d/munge/munge.key" || return 1
	munged -F --force --key-file="$d/munge/munge.key" --socket="$d/munge/sock" --pid-file="$d/munge/pid" \
		--log-file="$d/munge/log" --seed-file="$d/munge/seed" >"$d/munged.out" 2>&1 &
	SLURM_PIDS+=($!)
	local end=$((SECONDS + 10))
	until [[ -S "$d/munge/sock" ]]; do
		((SECONDS < end)) || { cat "$d/munged.out"; return 1; }
		sleep 0.1
	done
	local port=$((20000 + (($$ + ${SLURM_TRY:-0} * 4099) % 10000) * 2)) ctld
	if [[ "$1" == one ]]; then
		ctld="$node(127.0.0.1)"
		nodes="NodeName=$node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN"
	else
		ctld="n0($(hostip 0))"
		nodes=$(for i in $(seq 0 $((NHOSTS - 1))); do
			echo "NodeName=n$i NodeAddr=$(hostip "$i") CPUs=2 State=UNKNOWN"
			mkdir -p "$d/spool/n$i"
		done)
	fi
	cat >"$d/slurm.conf" <<-EOF
		ClusterName=gorunit
		SlurmctldHost=$ctld
		SlurmctldPort=$port
		SlurmdPort=$((port + 1))
		AuthType=auth/munge
		AuthInfo=socket=$d/munge/sock
		CredType=cred/munge
		SlurmUser=root
		SlurmdUser=root
		StateSaveLocation=$d/state
		SlurmdSpoolDir=$d/spool/%n
		SlurmctldPidFile=$d/slurmctld.pid
		SlurmdPidFile=$d/slurmd-%n.pid
		SlurmctldLogFile=$d/slurmctld.log
		SlurmdLogFile=$d/slurmd-%n.log
		ProctrackType=proctrack/linuxproc
		TaskPlugin=task/none
		MpiDefault=none
		SchedulerType=sched/builtin
		SelectType=select/cons_tres
		SelectTypeParameters=CR_CPU
		ReturnToService=2
		SlurmdParameters=config_overrides
		KillWait=5
		JobAcctGatherType=jobacct_gather/none
		AccountingStorageType=accounting_storage/none
		JobCompType=jobcomp/none
		$nodes
		PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
	EOF
	export SLURM_CONF="$d/slurm.conf"
	local want
	if [[ "$1" == one ]]; then
		mkdir -p "$d/spool/$node"
		(cd "$d" && exec slurmctld -D -c) >"$d/slurmctld.out" 2>&1 &
		SLURM_PIDS+=($!)
		(cd "$d" && exec slurmd -D) >"$d/slurmd.out" 2>&1 &
		SLURM_PIDS+=($!)
		want="1 idle"
	else
		# nsenter, not ip netns exec, which remounts /sys and breaks
		# slurmd's cgroup plugin.
		(cd "$d" && exec nsenter --net="/run/netns/${NS}h0" unshare --uts sh -c 'hostname n0; exec slurmctld -D -c') >"$d/slurmctld.out" 2>&1 &
		SLURM_PIDS+=($!)
		for i in $(seq 0 $((NHOSTS - 1))); do
			(cd "$d" && exec nsenter --net="/run/netns/${NS}h$i" unshare --uts sh -c "hostname n$i; exec slurmd -D -N n$i") >"$d/slurmd-$i.out" 2>&1 &
			SLURM_PIDS+=($!)
		done
		want="$NHOSTS idle"
	fi
	end=$((SECONDS + 20))
	until [[ "$(slurm_client sinfo -h -o '%D %T' 2>/dev/null)" == "$want" ]]; do
		if ((SECONDS >= end)); then
			tail -n 5 "$d"/*.log "$d"/*.out
			return 1
		fi
		sleep 0.2
	done
}

# slurm_client CMD...: run a Slurm client where it reaches slurmctld (in
# h0 for the multi-node cluster), in $T/slurm, with HOME there (ranks that
# meet without gorun keep their secret under $HOME/.goccl).
slurm_client() {
	if [[ "${SLURM_MULTI:-}" == 1 ]]; then
		(cd "$T/slurm" && HOME="$T/slurm/home" exec nsenter --net="/run/netns/${NS}h0" "$@")
	else
		(cd "$T/slurm" && HOME="$T/slurm/home" exec "$@")
	fi
}

# sbatch_wait NAME SBATCH-ARGS...: submit a job with its output in
# $T/NAME.out, wait (at most 60 s) for it to end, and set RC to its exit
# status. Polls quickly; sbatch --wait polls every few seconds.
sbatch_wait() {
	local name=$1 id end code info state
	shift
	RC=1
	id=$(slurm_client timeout -k 5 10 sbatch --parsable -o "$T/$name.out" "$@" 2>"$T/$name.err") || return
	# Wait for a final JobState: an empty squeue (a client that timed out
	# under load) is not an ended job, and a running job's ExitCode reads
	# 0:0 too (CI once read it before the job had written its output).
	end=$((SECONDS + 60))
	while :; do
		info=$(slurm_client timeout -k 5 5 scontrol show job "$id" 2>/dev/null)
		state=$(grep -o 'JobState=[A-Z_]*' <<<"$info" | head -n1)
		case "$state" in
		JobState=COMPLETED | JobState=FAILED | JobState=CANCELLED | JobState=TIMEOUT | JobState=NODE_FAIL | JobState=OUT_OF_MEMORY | JobState=PREEMPTED | JobState=BOOT_FAIL | JobState=DEADLINE) break ;;
		esac
		((SECONDS < end)) || { slurm_client scancel "$id"; echo "job $id: still $state after 60 s" >>"$T/$name.err"; return; }
		sleep 0.2
	done
	code=$(grep -o 'ExitCode=[0-9]*:[0-9]*' <<<"$info" | head -n1)
	[[ "$state" == "JobState=COMPLETED" && "$code" == "ExitCode=0:0" ]] && RC=0
	echo "job $id: $state $code" >>"$T/$name.err"
}

# slurm_check NAME WHAT RANKS [GREP]: the run NAME printed the example's
# verified line for RANKS ranks (and matches GREP in its stdout+stderr).
slurm_check() {
	if ((RC == 0)) && check_allreduce "$T/$1.out" "$3" && { [[ -z "${4:-}" ]] || grep -q -- "$4" "$T/$1.out" "$T/$1.err"; }; then
		ok "$2: $(grep -o 'over .*' "$T/$1.out" | head -c 100) ($(ms "$t0") ms)"
	else
		bad "$2: exit $RC"
		show "$1"
	fi
}

# slurm_up_retry one|multi: slurm_up, and once more on another port if the
# daemons did not come up (a port taken by chance, daemons slow under load).
slurm_up_retry() {
	slurm_up "$1" && return 0
	echo "slurm_up $1 failed; retrying on another port"
	slurm_down
	SLURM_TRY=1 slurm_up "$1"
}

part_slurm() {
	local t0
	t0=$(date +%s%N)
	install_pkgs slurm-wlm munge || { skipped "slurm: cannot install slurm-wlm and munge"; return; }
	say "slurm-wlm and munge present ($(ms "$t0") ms)"
	t0=$(date +%s%N)
	SLURM_MULTI=0
	if ! slurm_up_retry one >"$T/slurm-up.log" 2>&1; then
		skipped "slurm: cannot start munged/slurmctld/slurmd: $(tail -n 3 "$T/slurm-up.log" | tr '\n' ' ')"
		slurm_down
		return
	fi
	say "Slurm with one node up in $(ms "$t0") ms"
	slurm_one
	t0=$(date +%s%N)
	slurm_down
	say "Slurm stopped in $(ms "$t0") ms"

	t0=$(date +%s%N)
	if ! ns_up >"$T/ns-slurm.log" 2>&1; then
		skipped "slurm on 4 nodes: cannot create network namespaces: $(tail -n 3 "$T/ns-slurm.log" | tr '\n' ' ')"
		ns_down
		return
	fi
	SLURM_MULTI=1
	if ! slurm_up_retry multi >"$T/slurm-up.log" 2>&1; then
		bad "slurm on 4 nodes: cannot start the daemons in the namespaces: $(tail -n 3 "$T/slurm-up.log" | tr '\n' ' ')"
	else
		say "Slurm with 4 nodes in namespaces up in $(ms "$t0") ms"
		slurm_multi
	fi
	t0=$(date +%s%N)
	slurm_down
	SLURM_MULTI=0
	ns_down
	say "Slurm and namespaces stopped in $(ms "$t0") ms"
}

# slurm_one: the checks on the one-node cluster.
slurm_one() {
	local t0 name d="$T/slurm"
	local args=("$T/allreduce" -count 100000 -iters 3)

	# 1. srun -n 4 of the example, without gorun: bootstrap reads SLURM_*
	#    alone.
	name=slurm-srun
	t0=$(date +%s%N)
	slurm_client timeout -k 5 60 srun -n 4 "${args[@]}" >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	slurm_check "$name" "srun -n 4 allreduce (no gorun)" 4

	# 2. gorun inside salloc -n 4: it starts the ranks with srun.
	name=slurm-salloc
	t0=$(date +%s%N)
	slurm_client timeout -k 5 60 salloc -n 4 "$T/gorun" -v "${args[@]}" >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	slurm_check "$name" "salloc -n 4 gorun allreduce, ranks started by srun" 4 '^gorun: ranks 0-3: srun --ntasks=4 '

	# 3. gorun -n 4 inside an sbatch job of 1 CPU: srun --overcommit.
	name=slurm-sbatch
	t0=$(date +%s%N)
	sbatch_wait "$name" -n 1 --wrap "$T/gorun -v -n 4 ${args[*]}"
	slurm_check "$name" "sbatch -n 1 gorun -n 4 allreduce, srun --overcommit" 4 '^gorun: ranks 0-3: srun --ntasks=4 .*--overcommit'

	# 4. A failing rank under gorun inside salloc: srun stops the others,
	#    gorun names the rank and exits with its status.
	name=slurm-fail
	t0=$(date +%s%N)
	slurm_client timeout -k 5 60 salloc -n 4 "$T/gorun" sh -c 'if [ "$RANK" = 2 ]; then exit 3; fi; exec sleep 30' >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 3)) && grep -q '^gorun: rank 2 on .* exited with status 3 (reported by srun)' "$T/$name.err"; then
		ok "salloc gorun, rank 2 exits 3: gorun exit 3 after $(ms "$t0") ms: $(grep '^gorun: rank' "$T/$name.err")"
	else
		bad "salloc gorun, rank 2 exits 3: exit $RC"
		show "$name"
	fi

	# 5. SIGINT to gorun inside salloc reaches the tasks. srun with
	#    --quit-on-interrupt sends them SIGINT ("sending Ctrl-C") and at
	#    once cancels the step (SIGTERM, then SIGKILL): a task may die of
	#    the cancel before its INT trap's line is out or forwarded (CI,
	#    2 December: "[0] got INT", then "srun: forcing job termination",
	#    and no line from task 1, though it exited 0 on INT). So: SIGINT
	#    reached a task, every task ended, and gorun reports the signal.
	name=slurm-sigint
	slurm_client timeout -k 5 60 salloc -n 2 "$T/gorun" sh -c 'trap "echo got INT; exit 0" INT; echo up; sleep 30 & wait' >"$T/$name.out" 2>"$T/$name.err" &
	local spid=$! gpid="" end=$((SECONDS + 20)) p
	until [[ "$(grep -c '\] up$' "$T/$name.out")" == 2 ]] || ((SECONDS >= end)); do sleep 0.1; done
	for p in $(pids_of "$T/gorun"); do
		# gorun itself, not one of its srun task shims.
		if grep -q 'got INT' <<<"$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" && ! grep -q '^GORUN_SRUN_SHIM=' <<<"$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)"; then
			gpid=$p
		fi
	done
	if [[ -n "$gpid" ]]; then
		kill -INT "$gpid"
		t0=$(date +%s%N)
		if wait_exit "$spid" 20 && grep -q '^\[[01]\] got INT' "$T/$name.out" && grep -q '^gorun: stopped by signal: interrupt' "$T/$name.err" && ! pgrep -f 'got INT; exit 0' >/dev/null; then
			ok "SIGINT to gorun inside salloc: $(grep -c 'got INT' "$T/$name.out") of 2 tasks printed their INT trap's line, all ended; done after $(ms "$t0") ms"
		else
			bad "SIGINT to gorun inside salloc"
			show "$name"
		fi
	else
		bad "SIGINT to gorun inside salloc: gorun or tasks not up"
		kill -9 "$spid" 2>/dev/null
		show "$name"
	fi
}

# slurm_multi: the checks on the 4-node cluster.
slurm_multi() {
	local t0 name
	local args=("$T/allreduce" -count 100000 -iters 3)

	# 1. srun -N 4 -n 4 without gorun. Node names are not in DNS here, so
	#    MASTER_ADDR names task 0's node.
	name=slurm4-srun
	t0=$(date +%s%N)
	slurm_client env MASTER_ADDR="$(hostip 0)" timeout -k 5 60 srun -N 4 -n 4 "${args[@]}" >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	slurm_check "$name" "4 nodes: srun -N 4 -n 4 allreduce (no gorun, MASTER_ADDR=$(hostip 0))" 4

	# 2. gorun inside salloc -N 4 -n 8: 2 ranks per node, where srun put
	#    them, with the right local ranks; then the example.
	name=slurm4-place
	t0=$(date +%s%N)
	slurm_client timeout -k 5 60 salloc -N 4 -n 8 "$T/gorun" /bin/sh -c 'echo "rank $RANK node $(hostname) local $LOCAL_RANK/$LOCAL_WORLD_SIZE"' >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	local n i
	n=0
	for i in $(seq 0 $((NHOSTS - 1))); do
		n=$((n + $(grep -cE "^\[([0-9])\] rank \1 node n$i local [01]/2\$" "$T/$name.out")))
	done
	if ((RC == 0 && n == 8)); then
		ok "4 nodes: salloc -N 4 -n 8 gorun: 2 ranks on each node n0-n3 with LOCAL_RANK 0/1 of 2 ($(ms "$t0") ms)"
	else
		bad "4 nodes: salloc -N 4 -n 8 gorun: exit $RC, $n of 8 ranks placed as expected"
		show "$name"
	fi
	name=slurm4-salloc
	t0=$(date +%s%N)
	slurm_client timeout -k 5 60 salloc -N 4 -n 8 "$T/gorun" -v "${args[@]}" >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	slurm_check "$name" "4 nodes: salloc -N 4 -n 8 gorun allreduce, store on $(hostip 0)" 8 "^gorun: bootstrap store listening on $(hostip 0):"

	# 3. gorun in an sbatch job on 4 nodes: the batch script runs on n0.
	name=slurm4-sbatch
	t0=$(date +%s%N)
	sbatch_wait "$name" -N 4 -n 4 --wrap "$T/gorun -v ${args[*]}"
	slurm_check "$name" "4 nodes: sbatch -N 4 -n 4 gorun allreduce" 4 '^gorun: ranks 0-3: srun --ntasks=4 '
}

part_mpirun() {
	local t0 name=mpirun
	t0=$(date +%s%N)
	install_pkgs openmpi-bin || { skipped "mpirun: cannot install openmpi-bin"; return; }
	mkdir -p "$T/mpi-home"
	t0=$(date +%s%N)
	(cd "$T" && HOME="$T/mpi-home" timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
		"$T/allreduce" -count 100000 -iters 3) >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 0)) && check_allreduce "$T/$name.out" 2; then
		ok "mpirun -np 2 allreduce (no gorun): $(grep -o 'over .*' "$T/$name.out" | head -c 100) ($(ms "$t0") ms)"
	else
		bad "mpirun -np 2 allreduce (no gorun): exit $RC"
		show "$name"
	fi
}
