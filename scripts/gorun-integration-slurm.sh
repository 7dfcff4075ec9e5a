# gorun-integration-slurm.sh: the "slurm" and "mpirun" parts of
# scripts/gorun-integration.sh, which sources this file (it uses that
# script's variables and helpers: T, ok, bad, skipped, cleanup_fns, ...).
#
# Slurm runs with a private configuration: SLURM_CONF points the daemons
# and the clients at $T/slurm/slurm.conf, munged uses its own key and
# socket under $T, the ports are picked per run, and nothing in /etc is
# touched. The daemons run in the foreground of background jobs, so that
# their pids are known and cleanup kills exactly them.

slurm_down() {
	local pid p
	if [[ -n "${SLURM_CONF:-}" ]]; then
		scancel --quiet --user=root 2>/dev/null
		local end=$((SECONDS + 5))
		while [[ -n "$(squeue -h 2>/dev/null)" ]] && ((SECONDS < end)); do sleep 0.2; done
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

# slurm_up: munged, slurmctld and one slurmd (this host, 4 CPUs).
slurm_up() {
	local d="$T/slurm" node
	node=$(hostname)
	SLURM_PIDS=()
	cleanup_fns+=(slurm_down)
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
	local port=$((20000 + ($$ % 10000) * 2))
	cat >"$d/slurm.conf" <<-EOF
		ClusterName=gorunit
		SlurmctldHost=$node(127.0.0.1)
		SlurmctldPort=$port
		SlurmdPort=$((port + 1))
		AuthType=auth/munge
		AuthInfo=socket=$d/munge/sock
		CredType=cred/munge
		SlurmUser=root
		SlurmdUser=root
		StateSaveLocation=$d/state
		SlurmdSpoolDir=$d/spool
		SlurmctldPidFile=$d/slurmctld.pid
		SlurmdPidFile=$d/slurmd.pid
		SlurmctldLogFile=$d/slurmctld.log
		SlurmdLogFile=$d/slurmd.log
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
		NodeName=$node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
		PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
	EOF
	export SLURM_CONF="$d/slurm.conf"
	(cd "$d" && exec slurmctld -D -c) >"$d/slurmctld.out" 2>&1 &
	SLURM_PIDS+=($!)
	(cd "$d" && exec slurmd -D) >"$d/slurmd.out" 2>&1 &
	SLURM_PIDS+=($!)
	end=$((SECONDS + 20))
	until [[ "$(sinfo -h -o %T 2>/dev/null)" == idle ]]; do
		if ((SECONDS >= end)); then
			tail -n 5 "$d/slurmctld.log" "$d/slurmd.log" "$d/slurmctld.out" "$d/slurmd.out"
			return 1
		fi
		sleep 0.2
	done
}

part_slurm() {
	local t0 name d="$T/slurm"
	t0=$(date +%s%N)
	install_pkgs slurm-wlm munge || { skipped "slurm: cannot install slurm-wlm and munge"; return; }
	say "slurm-wlm and munge present ($(ms "$t0") ms)"
	t0=$(date +%s%N)
	if ! slurm_up >"$T/slurm-up.log" 2>&1; then
		skipped "slurm: cannot start munged/slurmctld/slurmd: $(tail -n 3 "$T/slurm-up.log" | tr '\n' ' ')"
		slurm_down
		return
	fi
	say "munged, slurmctld, slurmd up in $(ms "$t0") ms"
	# Ranks that meet without gorun keep their secret under $HOME/.goccl.
	local envs=(env HOME="$d/home")
	local args=("$T/allreduce" -count 100000 -iters 3)

	# 1. srun -n 4 of the example, without gorun: bootstrap reads SLURM_*.
	name=slurm-srun
	t0=$(date +%s%N)
	(cd "$d" && "${envs[@]}" timeout 60 srun -n 4 "${args[@]}") >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 0)) && check_allreduce "$T/$name.out" 4; then
		ok "srun -n 4 allreduce (no gorun): $(grep -o 'over .*' "$T/$name.out" | head -c 100) ($(ms "$t0") ms)"
	else
		bad "srun -n 4 allreduce (no gorun): exit $RC"
		show "$name"
	fi

	# 2. gorun inside salloc -n 4: it starts the ranks with srun.
	name=slurm-salloc
	t0=$(date +%s%N)
	(cd "$d" && "${envs[@]}" timeout 60 salloc -n 4 "$T/gorun" -v "${args[@]}") >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 0)) && check_allreduce "$T/$name.out" 4 && grep -q '^gorun: ranks 0-3: srun --ntasks=4 ' "$T/$name.err"; then
		ok "salloc -n 4 gorun allreduce: ranks started by srun; $(grep -o 'over .*' "$T/$name.out" | head -c 100) ($(ms "$t0") ms)"
	else
		bad "salloc -n 4 gorun allreduce: exit $RC"
		show "$name"
	fi

	# 3. gorun -n 4 inside an sbatch job of 1 CPU: srun --overcommit.
	name=slurm-sbatch
	t0=$(date +%s%N)
	(cd "$d" && "${envs[@]}" timeout 60 sbatch --wait -n 1 -o "$T/$name.out" \
		--wrap "$T/gorun -v -n 4 ${args[*]}") >"$T/$name.err" 2>&1
	RC=$?
	if ((RC == 0)) && check_allreduce "$T/$name.out" 4 && grep -q '^gorun: ranks 0-3: srun --ntasks=4 .*--overcommit' "$T/$name.out"; then
		ok "sbatch -n 1 gorun -n 4 allreduce: srun --overcommit; $(grep -o 'over .*' "$T/$name.out" | head -c 100) ($(ms "$t0") ms)"
	else
		bad "sbatch -n 1 gorun -n 4 allreduce: exit $RC"
		show "$name"
	fi

	# 4. A failing rank under gorun inside salloc: srun stops the others,
	#    gorun names the rank and exits with its status.
	name=slurm-fail
	t0=$(date +%s%N)
	(cd "$d" && timeout 60 salloc -n 4 "$T/gorun" sh -c 'if [ "$RANK" = 2 ]; then exit 3; fi; exec sleep 30') >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 3)) && grep -q '^gorun: rank 2 on .* exited with status 3 (reported by srun)' "$T/$name.err"; then
		ok "salloc gorun, rank 2 exits 3: gorun exit 3 after $(ms "$t0") ms: $(grep '^gorun: rank' "$T/$name.err")"
	else
		bad "salloc gorun, rank 2 exits 3: exit $RC"
		show "$name"
	fi

	# 5. SIGINT to gorun inside salloc reaches the tasks.
	name=slurm-sigint
	(cd "$d" && exec timeout 60 salloc -n 2 "$T/gorun" sh -c 'trap "echo got INT; exit 5" INT; echo up; sleep 30 & wait') >"$T/$name.out" 2>"$T/$name.err" &
	local spid=$! gpid="" end=$((SECONDS + 20))
	until [[ "$(grep -c '\] up$' "$T/$name.out")" == 2 ]] || ((SECONDS >= end)); do sleep 0.1; done
	gpid=$(pids_of "$T/gorun" | tr ' ' '\n' | while read -r p; do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'got INT' && [[ -z "$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep '^GORUN_SRUN_SHIM=')" ]] && echo "$p"
	done | head -n1)
	if [[ -n "$gpid" ]]; then
		kill -INT "$gpid"
		t0=$(date +%s%N)
		if wait_exit "$spid" 20 && grep -q '^\[0\] got INT' "$T/$name.out" && grep -q '^\[1\] got INT' "$T/$name.out" && grep -q '^gorun: stopped by signal: interrupt' "$T/$name.err"; then
			ok "SIGINT to gorun inside salloc: every task got SIGINT; done after $(ms "$t0") ms"
		else
			bad "SIGINT to gorun inside salloc"
			show "$name"
		fi
	else
		bad "SIGINT to gorun inside salloc: gorun or tasks not up"
		kill -9 "$spid" 2>/dev/null
		show "$name"
	fi
	t0=$(date +%s%N)
	slurm_down
	say "Slurm stopped in $(ms "$t0") ms"
}

part_mpirun() {
	local t0 name=mpirun
	t0=$(date +%s%N)
	install_pkgs openmpi-bin || { skipped "mpirun: cannot install openmpi-bin"; return; }
	mkdir -p "$T/mpi-home"
	t0=$(date +%s%N)
	(cd "$T" && HOME="$T/mpi-home" timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
		"$T/allreduce" -count 100000 -iters 3) >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 0)) && check_allreduce "$T/$name.out" 2; then
		ok "mpirun -np 2 allreduce (no gorun): $(grep -o 'over .*' "$T/$name.out" | head -c 100) ($(ms "$t0") ms)"
	else
		bad "mpirun -np 2 allreduce (no gorun): exit $RC"
		show "$name"
	fi
}
