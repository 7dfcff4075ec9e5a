#!/bin/sh
# rank-usage.sh BINARY_PATH [INTERVAL]: samples, until no process runs
# BINARY_PATH any more, every rank process's resident memory (VmRSS), peak
# (VmHWM), address space (VmSize) and open descriptors, and prints the
# largest value of each seen over the run and the number of processes seen.
# For scale runs of gorun jobs (issue 16): start it next to the gorun.
bin=$1
int=${2:-2}
[ -n "$bin" ] || { echo "usage: rank-usage.sh BINARY_PATH [INTERVAL]" >&2; exit 2; }
seen=0
maxrss=0 maxhwm=0 maxvsz=0 maxfd=0 sumfd=0 nfd=0
started=0
while :; do
	pids=$(pgrep -f "^$bin( |\$)")
	if [ -z "$pids" ]; then
		[ $started -eq 1 ] && break
		sleep 0.5; continue
	fi
	started=1
	n=0
	for p in $pids; do
		s=/proc/$p/status
		[ -r $s ] || continue
		n=$((n+1))
		eval $(awk '/^VmRSS/{print "rss="$2} /^VmHWM/{print "hwm="$2} /^VmSize/{print "vsz="$2}' $s 2>/dev/null)
		fd=$(ls /proc/$p/fd 2>/dev/null | wc -l)
		[ "${rss:-0}" -gt $maxrss ] && maxrss=$rss
		[ "${hwm:-0}" -gt $maxhwm ] && maxhwm=$hwm
		[ "${vsz:-0}" -gt $maxvsz ] && maxvsz=$vsz
		[ "$fd" -gt $maxfd ] && maxfd=$fd
	done
	[ $n -gt $seen ] && seen=$n
	sleep $int
done
echo "rank-usage: $seen processes at most; per rank max: VmRSS $((maxrss/1024)) MiB, VmHWM $((maxhwm/1024)) MiB, VmSize $((maxvsz/1024)) MiB, fds $maxfd"
