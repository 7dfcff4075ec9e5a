# gorun-integration-hosts.sh: the "hosts" and "local" parts of
# scripts/gorun-integration.sh, which sources this file (it uses that
# script's variables and helpers: T, NS, ok, bad, skipped, cleanup_fns, ...).

NHOSTS=4
hostip() { echo "10.77.0.$(($1 + 1))"; }

ns_down() {
	local i pid
	for i in $(seq 0 $((NHOSTS - 1))); do
		pid=$(cat "$T/sshd-h$i.pid" 2>/dev/null) && kill "$pid" 2>/dev/null
	done
	for i in $(seq 0 $((NHOSTS - 1))); do
		# Whatever still runs in a host namespace was started by this script.
		pid=$(ip netns pids "${NS}h$i" 2>/dev/null) && [[ -n "$pid" ]] && kill -9 $pid 2>/dev/null
		ip netns del "${NS}h$i" 2>/dev/null
	done
	ip netns del "${NS}sw" 2>/dev/null
	NS_UP=
}

# ns_up: namespaces h0..h3 on a bridge in namespace sw.
ns_up() {
	local i
	[[ -n "${NS_UP:-}" ]] && return 0
	NS_UP=1
	cleanup_fns+=(ns_down)
	ip netns add "${NS}sw" || return 1
	ip -n "${NS}sw" link add br0 type bridge &&
		ip -n "${NS}sw" link set br0 up || return 1
	for i in $(seq 0 $((NHOSTS - 1))); do
		ip netns add "${NS}h$i" &&
			ip -n "${NS}h$i" link set lo up &&
			ip link add "eth$i" netns "${NS}h$i" type veth peer name "p$i" netns "${NS}sw" &&
			ip -n "${NS}sw" link set "p$i" master br0 &&
			ip -n "${NS}sw" link set "p$i" up &&
			ip -n "${NS}h$i" addr add "$(hostip "$i")/24" dev "eth$i" &&
			ip -n "${NS}h$i" link set "eth$i" up || return 1
	done
}

# sshd_up: an sshd in each host namespace, a key to log in with, and $SSH.
sshd_up() {
	local i
	mkdir -p /run/sshd
	ssh-keygen -q -t ed25519 -N '' -f "$T/hostkey" && ssh-keygen -q -t ed25519 -N '' -f "$T/id" || return 1
	cp "$T/id.pub" "$T/authorized_keys"
	printf '# the login shell start-up file of the test hosts\nexport PATH="/usr/local/go/bin:$PATH"\n' >"$T/bashrc"
	for i in $(seq 0 $((NHOSTS - 1))); do
		cat >"$T/sshd-h$i.conf" <<-EOF
			ListenAddress $(hostip "$i")
			HostKey $T/hostkey
			AuthorizedKeysFile $T/authorized_keys
			PidFile $T/sshd-h$i.pid
			PermitRootLogin prohibit-password
			PasswordAuthentication no
			KbdInteractiveAuthentication no
			UsePAM no
			StrictModes no
		EOF
		# Each host is a fresh machine: its login shells read a plain
		# ~/.bashrc, not this machine's (whose pyenv set-up takes a lock
		# that 32 shells starting at once queue on for a minute). The
		# sshd, and every shell it starts, sees it through a mount
		# namespace of its own; nothing outside changes.
		ip netns exec "${NS}h$i" unshare -m sh -c \
			'{ [ ! -e "$HOME/.bashrc" ] || mount --bind "$1" "$HOME/.bashrc"; } && exec /usr/sbin/sshd -f "$2" -E "$3"' \
			sh "$T/bashrc" "$T/sshd-h$i.conf" "$T/sshd-h$i.log" || return 1
	done
	SSH="ssh -i $T/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5"
	for i in $(seq 1 $((NHOSTS - 1))); do
		local end=$((SECONDS + 10))
		until ip netns exec "${NS}h0" $SSH -o BatchMode=yes "$(hostip "$i")" true 2>"$T/ssh-probe.log"; do
			if ((SECONDS >= end)); then
				cat "$T/ssh-probe.log" "$T/sshd-h$i.log"
				return 1
			fi
			sleep 0.2
		done
	done
}

# in_h0 CMD...: run CMD on host 0, the launching host.
in_h0() { ip netns exec "${NS}h0" "$@"; }

hostlist() { # slots
	local i out=()
	for i in $(seq 0 $((NHOSTS - 1))); do out+=("$(hostip "$i"):$1"); done
	local IFS=,
	echo "${out[*]}"
}

# ns_pid_of NSNAME EXE: the pid of the process running EXE in namespace NSNAME.
ns_pid_of() {
	local p
	for p in $(ip netns pids "$1"); do
		[[ "/proc/$p/exe" -ef "$2" ]] 2>/dev/null && { echo "$p"; return 0; }
	done
	return 1
}

# run_bg NAME CMD...: start CMD in the background, output in $T/NAME.{out,err}.
run_bg() {
	local name=$1
	shift
	"$@" >"$T/$name.out" 2>"$T/$name.err" &
	BGPID=$!
}

# wait_exit PID SECONDS: wait for a background job; sets RC (or returns 1
# after SECONDS, having killed it).
wait_exit() {
	local end=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null; do
		if ((SECONDS >= end)); then
			kill -9 "$1" 2>/dev/null
			wait "$1" 2>/dev/null
			return 1
		fi
		sleep 0.05
	done
	wait "$1"
	RC=$?
}

show() { # name: the tail of a run's output and more of its errors, for a failure
	# (A rank's own error comes before a launcher's closing box: mpirun's
	# alone is ten lines.)
	{ tail -v -n 5 "$T/$1.out"; tail -v -n 30 "$T/$1.err"; } 2>&1 | sed 's/^/    /'
}

part_hosts() {
	local t0 name pid ms
	install_pkgs openssh-server openssh-client iproute2 || { skipped "hosts: cannot install openssh-server"; return; }
	t0=$(date +%s%N)
	if ! { ns_up && sshd_up; } >"$T/ns.log" 2>&1; then
		skipped "hosts: cannot create network namespaces with sshd: $(tail -n 3 "$T/ns.log" | tr '\n' ' ')"
		ns_down
		return
	fi
	say "4 hosts up (namespaces + sshd) in $(ms "$t0") ms"
	local gorun=("$T/gorun" --ssh "$SSH")
	local long=("$T/allreduce" -count 262144 -iters 100000000)

	# 1. allreduce across the 4 hosts, 1 and 2 ranks per host.
	for slots in 1 2; do
		name=hosts-allreduce-$slots
		t0=$(date +%s%N)
		in_h0 timeout -k 5 120 "${gorun[@]}" -H "$(hostlist $slots)" "$T/allreduce" -count 100000 -iters 3 >"$T/$name.out" 2>"$T/$name.err"
		RC=$?
		if ((RC == 0)) && check_allreduce "$T/$name.out" $((NHOSTS * slots)); then
			ok "gorun -H $(hostlist $slots) allreduce: $(grep -o 'over .*' "$T/$name.out" | head -c 120) ($(ms "$t0") ms)"
		else
			bad "gorun -H $(hostlist $slots) allreduce: exit $RC"
			show "$name"
		fi
	done

	# 1a. Every collective and algorithm (hierarchical ones included) on
	#     2 hosts of 3 ranks: shared memory within a host, TCP between.
	name=hosts-collcheck
	t0=$(date +%s%N)
	in_h0 timeout -k 5 300 "${gorun[@]}" -H "$(hostip 0):3,$(hostip 1):3" "$T/collcheck" -counts 1,13,1000 -types float32 \
		>"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	if ((RC == 0)) && grep -q "collcheck: 6 ranks via .*shm.*: every collective and algorithm verified for float32 x 1000" "$T/$name.out"; then
		ok "gorun -H $(hostip 0):3,$(hostip 1):3 collcheck: $(grep -o 'via .*x 1000 .*' "$T/$name.out" | head -c 120) ($(ms "$t0") ms)"
	else
		bad "gorun -H $(hostip 0):3,$(hostip 1):3 collcheck: exit $RC"
		show "$name"
	fi

	# 1b. 32 ranks on 2 hosts, more than sshd's default MaxStartups (10)
	#     at once: the ranks of a host share ssh connections gorun opens (8 ranks each).
	name=hosts-many
	t0=$(date +%s%N)
	# The remote login shell runs the user's start-up files (here, pyenv's
	# rehash under a lock that other shells of this script may hold for up
	# to its 60 s timeout): the bound leaves room for that.
	# The sshds and login shells of this machine are not ours: a refused
	# handshake (kex reset) or a slow start-up file is retried once, and
	# the retry is reported.
	local n try
	for try in 1 2; do
		in_h0 timeout -k 5 150 "${gorun[@]}" -H "$(hostip 1):16,$(hostip 2):16" /bin/sh -c \
			'echo "rank $RANK local $LOCAL_RANK/$LOCAL_WORLD_SIZE on $(hostname -I)"' >"$T/$name.out" 2>"$T/$name.err"
		RC=$?
		n=$(grep -cE '^\[([0-9]+)\] rank \1 local [0-9]+/16 on 10\.77\.0\.[23] *$' "$T/$name.out")
		((RC == 0 && n == 32)) && break
		((try == 1)) && say "gorun -H ...:16 x 2: exit $RC, $n of 32 ranks reported ($(grep -m1 -o 'kex_exchange_identification.*\|pyenv: cannot rehash' "$T/$name.err")); trying once more"
	done
	if ((RC == 0 && n == 32)); then
		ok "gorun -H $(hostip 1):16,$(hostip 2):16: 32 ranks over 4 shared ssh connections (attempt $try, $(ms "$t0") ms)"
	else
		bad "gorun -H $(hostip 1):16,$(hostip 2):16: exit $RC, $n of 32 ranks reported"
		show "$name"
	fi

	# 2. SIGKILL a remote rank mid-run.
	name=hosts-kill
	run_bg "$name" ip netns exec "${NS}h0" "${gorun[@]}" -H "$(hostlist 1)" "${long[@]}"
	local gpid=$BGPID
	if wait_count "$T/allreduce" $NHOSTS 90 && sleep 1 && pid=$(ns_pid_of "${NS}h2" "$T/allreduce"); then
		kill -9 "$pid"
		t0=$(date +%s%N)
		if ! wait_exit "$gpid" 20; then
			bad "SIGKILL of remote rank 2: gorun still running 20 s later"
		else
			ms=$(ms "$t0")
			if ((RC != 0 && ms <= 5000)) && grep -q "^gorun: rank 2 on $(hostip 2) .*killed by signal: killed" "$T/$name.err"; then
				ok "SIGKILL of remote rank 2: gorun exited $RC after $ms ms: $(grep '^gorun: rank' "$T/$name.err" | head -c 160)"
			else
				bad "SIGKILL of remote rank 2: exit $RC after $ms ms"
				show "$name"
			fi
		fi
		if left=$(wait_gone "$T/allreduce" 5); then
			ok "SIGKILL of remote rank 2: no rank process left"
		else
			bad "SIGKILL of remote rank 2: rank processes left behind: $left"
		fi
	else
		bad "SIGKILL of remote rank 2: ranks did not start"
		kill -9 "$gpid" 2>/dev/null
		show "$name"
		wait_gone "$T/allreduce" 5 >/dev/null
	fi

	# 3. The ssh link of rank 2 dropped: its ssh client is killed on the
	#    launching host; the remote wrapper must stop the rank.
	name=hosts-link
	run_bg "$name" ip netns exec "${NS}h0" "${gorun[@]}" --grace 1s -H "$(hostlist 1)" "${long[@]}"
	gpid=$BGPID
	local sshpid="" p
	if wait_count "$T/allreduce" $NHOSTS 90; then
		for p in $(ip netns pids "${NS}h0"); do
			if [[ "$(readlink "/proc/$p/exe")" == */ssh ]] && grep -q -- "-- $(hostip 2) " <<<"$(tr '\0' ' ' <"/proc/$p/cmdline")"; then
				sshpid=$p
			fi
		done
	fi
	if [[ -n "$sshpid" ]] && pid=$(ns_pid_of "${NS}h2" "$T/allreduce"); then
		kill -9 "$sshpid"
		t0=$(date +%s%N)
		local end=$((SECONDS + 10))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.05; done
		if kill -0 "$pid" 2>/dev/null; then
			bad "ssh link of rank 2 cut: the remote rank still runs 10 s later"
		else
			ok "ssh link of rank 2 cut: the remote rank stopped $(ms "$t0") ms later"
		fi
		if wait_exit "$gpid" 15 && ((RC != 0)) && grep -q "^gorun: rank 2 on $(hostip 2) (ssh pid [0-9]*) killed by signal: killed" "$T/$name.err"; then
			ok "ssh link of rank 2 cut: gorun exited $RC: $(grep '^gorun: rank' "$T/$name.err" | head -c 160)"
		else
			bad "ssh link of rank 2 cut: gorun exit ${RC:-none}"
			show "$name"
		fi
		if left=$(wait_gone "$T/allreduce" 5); then
			ok "ssh link of rank 2 cut: no rank process left"
		else
			bad "ssh link of rank 2 cut: rank processes left behind: $left"
		fi
	else
		bad "ssh link of rank 2 cut: ranks or ssh client not found"
		kill -9 "$gpid" 2>/dev/null
		show "$name"
		wait_gone "$T/allreduce" 5 >/dev/null
	fi

	# 4. SIGINT to gorun reaches every rank, remote ones too.
	name=hosts-sigint
	run_bg "$name" ip netns exec "${NS}h0" "${gorun[@]}" -H "$(hostlist 1)" "${long[@]}"
	gpid=$BGPID
	if wait_count "$T/allreduce" $NHOSTS 90 && sleep 0.5; then
		# ip netns exec execs gorun, so gpid is gorun's pid.
		kill -INT "$gpid"
		t0=$(date +%s%N)
		if wait_exit "$gpid" 15 && ((RC == 130)) && left=$(wait_gone "$T/allreduce" 5); then
			ok "SIGINT to gorun: exit 130 after $(ms "$t0") ms, every rank stopped"
		else
			bad "SIGINT to gorun: exit ${RC:-none}, left: ${left:-}"
			show "$name"
		fi
	else
		bad "SIGINT to gorun: ranks did not start"
		kill -9 "$gpid" 2>/dev/null
		show "$name"
	fi
	wait_gone "$T/allreduce" 5 >/dev/null
	t0=$(date +%s%N)
	ns_down
	say "4 hosts removed in $(ms "$t0") ms"
}

part_local() {
	local name=local-kill t0 pid p ms
	run_bg "$name" "$T/gorun" -n 4 "$T/allreduce" -count 262144 -iters 100000000
	local gpid=$BGPID
	pid=""
	if wait_count "$T/allreduce" 4 30 && sleep 1; then
		for p in $(pids_of "$T/allreduce"); do
			grep -qx GOCCL_RANK=2 <<<"$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)" && pid=$p
		done
	fi
	if [[ -z "$pid" ]]; then
		bad "SIGKILL of local rank 2: ranks did not start"
		kill -9 "$gpid" 2>/dev/null
		show "$name"
		wait_gone "$T/allreduce" 5 >/dev/null
		return
	fi
	kill -9 "$pid"
	t0=$(date +%s%N)
	if ! wait_exit "$gpid" 20; then
		bad "SIGKILL of local rank 2: gorun still running 20 s later"
	else
		ms=$(ms "$t0")
		if ((RC != 0 && ms <= 5000)) && grep -q "^gorun: rank 2 on .* (pid $pid) killed by signal: killed" "$T/$name.err"; then
			ok "SIGKILL of local rank 2: gorun exited $RC after $ms ms: $(grep '^gorun: rank' "$T/$name.err" | head -c 160)"
		else
			bad "SIGKILL of local rank 2: exit $RC after $ms ms"
			show "$name"
		fi
	fi
	if left=$(wait_gone "$T/allreduce" 2); then
		ok "SIGKILL of local rank 2: no rank process left"
	else
		bad "SIGKILL of local rank 2: rank processes left behind: $left"
	fi
}
