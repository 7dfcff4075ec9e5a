#!/usr/bin/env bash
# softroce-test.sh runs goccl's verbs tests on a real verbs device: Soft-RoCE
# (the kernel's rdma_rxe) inside a QEMU guest booted from a Debian 6.1
# kernel, because the host kernel may have no RDMA support at all.
#
#   scripts/softroce-test.sh [-race] [-count N] [-run REGEX] [-bench REGEX] [-timeout DURATION] [PKG...]
#
# PKG defaults to the packages in GUEST_PKGS below. For each, the host builds
# a test binary (go test -c) and the guest runs it with -test.v. Other
# commands (multi-process tests launched by a driver binary, say) go in
# GUEST_CMDS, and the binaries they need in GUEST_BINS: the guest's /init
# runs its list of commands one after the other and prints
# "GOCCL-RESULT <name> PASS|FAIL" for each.
#
# What it does: installs its host packages if missing (scripts/install-deps.sh
# --vm, apt-get), downloads the kernel package that linux-image-amd64 depends
# on (apt-get download, unpacked with dpkg-deb into a cache directory, never
# installed), packs a busybox initramfs with the test binaries, their shared
# libraries, the rxe provider and the `rdma` tool, boots it under TCG
# (software emulation: no /dev/kvm needed; libibverbs.so.1 is copied in
# explicitly, since goccl loads it at run time and no binary links it), loads e1000 crc32_generic ib_core ib_uverbs udp_tunnel
# ip6_udp_tunnel rdma_rxe, adds rxe0 on lo, runs the tests with
# GOCCL_REQUIRE_VERBS=1 (a verbs test that would skip fails instead), and
# powers off. The host reads the serial console and exits non-zero on any
# failing or skipped test, a failed command, or a run longer than
# GOCCL_VM_TIMEOUT seconds (default 480).
#
# Environment: GOCCL_VM_CACHE (default /tmp/goccl-softroce) holds the kernel;
# GOCCL_VM_NETDEV (lo or eth0, default lo) is the netdev rxe0 binds to;
# GOCCL_VM_ENV ("K=V ...") is exported to the guest's commands;
# GOCCL_VM_CMDS (lines "name|command") adds guest commands and
# GOCCL_VM_BINS (main packages, space-separated) the binaries they run;
# GOCCL_VM_MEM (default 2G); GOCCL_VM_ACCEL (tcg, the default, or kvm); the console
# log of the last run is kept in $GOCCL_VM_CACHE/console.log.
set -euo pipefail

# Test packages built and run in the guest. Extend this list (or pass
# packages on the command line).
GUEST_PKGS=(
	./transport/verbs
)
# Commands (main packages) built with go build into the guest's /usr/bin,
# for GUEST_CMDS to use (a launcher, a multi-process test driver).
GUEST_BINS=(
	./cmd/gorun
	./examples/allreduce
	./examples/collcheck
)
# Extra guest commands, "name|shell command", run after the package tests,
# from /tmp with GOCCL_REQUIRE_VERBS=1 and GOCCL_IB_HCA==rxe0 set. A command
# fails the run by exiting non-zero; the Go test lines it prints are counted
# like the package tests'. Example (tried: passes over rxe0), with
# GUEST_BINS=(./cmd/gorun ./examples/allreduce):
#   "allreduce-verbs|GOCCL_TRANSPORT=verbs gorun -n 2 allreduce -count 65536"
# or the same from the command line:
#   GOCCL_VM_BINS="./cmd/gorun ./examples/allreduce" \
#   GOCCL_VM_CMDS='allreduce-verbs|GOCCL_TRANSPORT=verbs gorun -n 2 allreduce -count 65536' \
#   scripts/softroce-test.sh
GUEST_CMDS=(
	"allreduce-verbs-2|GOCCL_TRANSPORT=verbs gorun -n 2 allreduce -count 262147"
	"allreduce-verbs-3|GOCCL_TRANSPORT=verbs gorun -n 3 allreduce -count 100003 -registered"
	"collectives-verbs-2|GOCCL_TRANSPORT=verbs gorun -n 2 collcheck -counts 0,7,4099 -types float32"
	"collectives-verbs-3|GOCCL_TRANSPORT=verbs gorun -n 3 collcheck -counts 1,4099 -types int32"
)

run_re="" bench_re="" test_timeout="6m" count="" build_flags=()
pkgs=()
while (($#)); do
	case "$1" in
	-run) run_re="$2"; shift 2 ;;
	-bench) bench_re="$2"; shift 2 ;;
	-timeout) test_timeout="$2"; shift 2 ;;
	-count) count="$2"; shift 2 ;;
	-race) build_flags+=(-race); shift ;;
	-h | -help | --help) sed -n '2,30p' "$0"; exit 0 ;;
	-*) echo "softroce-test: unknown flag $1" >&2; exit 2 ;;
	*) pkgs+=("$1"); shift ;;
	esac
done
((${#pkgs[@]})) || pkgs=("${GUEST_PKGS[@]}")

start=$(date +%s)
export PATH="$PATH:/usr/local/go/bin"
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${GOCCL_VM_CACHE:-/tmp/goccl-softroce}
netdev=${GOCCL_VM_NETDEV:-lo}
vm_timeout=${GOCCL_VM_TIMEOUT:-480}
log() { echo "softroce-test: $*" >&2; }

# 1. Host packages.
bash "$top/scripts/install-deps.sh" --vm

# 2. The guest kernel: the version linux-image-amd64 depends on.
mkdir -p "$cache"
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-6\.1/ {print $2; exit}' || true)
if [[ -z "$kpkg" ]]; then
	flock -w 900 /tmp/goccl-apt.lock apt-get -o DPkg::Lock::Timeout=900 update -qq >/dev/null
	kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-6\.1/ {print $2; exit}')
fi
[[ -n "$kpkg" ]] || { log "cannot find the linux-image-6.1 package linux-image-amd64 depends on"; exit 1; }
kver=${kpkg#linux-image-}
kdir="$cache/$kver"
modules=(e1000 crc32_generic ib_core ib_uverbs udp_tunnel ip6_udp_tunnel rdma_rxe)
exec 9>"$cache/.lock"
flock 9 # one download and unpack at a time
if [[ ! -f "$kdir/.done" ]]; then
	deb=$(ls "$cache"/"${kpkg}"_*.deb 2>/dev/null | head -n1 || true)
	if [[ -z "$deb" ]]; then
		log "downloading $kpkg"
		(cd "$cache" && apt-get download -q "$kpkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
		deb=$(ls "$cache"/"${kpkg}"_*.deb 2>/dev/null | head -n1 || true)
		[[ -n "$deb" ]] || { log "apt-get download $kpkg failed"; exit 1; }
	fi
	rm -rf "$kdir" && mkdir -p "$kdir"
	pats=("./boot/vmlinuz-$kver")
	for m in "${modules[@]}"; do pats+=("*/$m.ko" "*/$m.ko.xz"); done
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$kdir" --wildcards "${pats[@]}" 2>/dev/null || true
	[[ -f "$kdir/boot/vmlinuz-$kver" ]] || { log "no vmlinuz in $deb"; exit 1; }
	touch "$kdir/.done"
fi
flock -u 9

# 3. The initramfs.
work=$(mktemp -d "${TMPDIR:-/tmp}/goccl-softroce.XXXXXX")
[[ -n "${GOCCL_VM_KEEP:-}" ]] || trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{proc,sys,dev,tmp,etc/libibverbs.d,modules,usr/bin,usr/lib}
for d in bin sbin lib lib64; do
	if [[ -L "/$d" ]]; then
		ln -s "$(readlink "/$d")" "$root/$d"
		mkdir -p "$root/$(readlink -f "/$d")"
	else
		mkdir -p "$root/$d"
	fi
done

copy_file() { # copy a host file to the same path in the image
	local f=$1
	[[ -e "$root$f" ]] && return 0
	mkdir -p "$root$(dirname "$f")"
	cp -L "$f" "$root$f"
}
copy_libs() { # the shared libraries ldd says a binary needs, ld-linux included
	local lib
	while read -r lib; do
		if [[ -n "$lib" && -e "$lib" ]]; then copy_file "$lib"; fi
	done < <(ldd "$1" 2>/dev/null | awk '/=> \// {print $3} /^[ \t]*\/[^ ]+ \(/ {print $1}')
}
copy_with_libs() { # a host binary or library and its libraries
	copy_file "$1"
	copy_libs "$1"
}

cp /bin/busybox "$root/bin/busybox"
copy_with_libs "$(command -v rdma)"
copy_with_libs "$(command -v ibv_devinfo)"
libdir=/usr/lib/x86_64-linux-gnu
# goccl loads libibverbs.so.1 at run time (dlopen): ldd of its binaries does
# not list it, so it goes into the image explicitly.
copy_with_libs "$libdir/libibverbs.so.1"
copy_with_libs "$libdir/libibverbs/librxe-rdmav34.so"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
for g in /lib/x86_64-linux-gnu/libgcc_s.so.1 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1; do
	if [[ -e "$g" ]]; then copy_file "$g"; break; fi
done

for m in "${modules[@]}"; do
	ko=$(find "$kdir/lib/modules" -name "$m.ko" -o -name "$m.ko.xz" | head -n1)
	[[ -n "$ko" ]] || { log "module $m not found in $kpkg"; exit 1; }
	case "$ko" in
	*.xz) xz -dc "$ko" >"$root/modules/$m.ko" ;;
	*) cp "$ko" "$root/modules/$m.ko" ;;
	esac
done
printf '%s\n' "${modules[@]}" >"$root/modules.list"

# Test binaries.
: >"$root/tests.list"
cd "$top"
for p in "${pkgs[@]}"; do
	name=$(basename "$p")
	log "building $p"
	go test -c "${build_flags[@]}" -o "$root/usr/bin/$name.test" "$p"
	if grep -q libibverbs <<<"$(ldd "$root/usr/bin/$name.test")"; then
		log "$p links libibverbs: it must load it at run time"
		exit 1
	fi
	copy_libs "$root/usr/bin/$name.test"
	# The conformance suite over the in-memory fake runs on the host (go
	# test); in the guest it would only take time (25 s under TCG).
	args="-test.v -test.timeout $test_timeout -test.skip '^TestConformanceFake\$'"
	[[ -n "$run_re" ]] && args+=" -test.run '$run_re'"
	[[ -n "$bench_re" ]] && args+=" -test.bench '$bench_re' -test.benchtime 2s"
	[[ -n "$count" ]] && args+=" -test.count $count"
	echo "$name|cd /tmp && /usr/bin/$name.test $args" >>"$root/tests.list"
done
read -r -a env_bins <<<"${GOCCL_VM_BINS:-}"
for b in "${GUEST_BINS[@]}" "${env_bins[@]}"; do
	log "building $b"
	go build "${build_flags[@]}" -o "$root/usr/bin/$(basename "$b")" "$b"
	copy_libs "$root/usr/bin/$(basename "$b")"
done
for c in "${GUEST_CMDS[@]}"; do echo "$c" >>"$root/tests.list"; done
if [[ -n "${GOCCL_VM_CMDS:-}" ]]; then echo "$GOCCL_VM_CMDS" >>"$root/tests.list"; fi

ipcmd=""
if [[ "$netdev" != lo ]]; then
	ipcmd="ip addr add 10.0.2.15/24 dev $netdev; ip link set $netdev up"
fi
cat >"$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
echo "GOCCL-BOOT kernel \$(uname -r)"
for m in \$(cat /modules.list); do
	insmod /modules/\$m.ko || echo "GOCCL-ERROR insmod \$m"
done
ip link set lo up
$ipcmd
rdma link add rxe0 type rxe netdev $netdev || echo "GOCCL-ERROR rdma link add rxe0 netdev $netdev"
# The port turns ACTIVE once the netdev has carrier (at once on lo).
i=0
while ! grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && [ \$i -lt 100 ]; do
	sleep 0.1
	i=\$((i + 1))
done
rdma link show
ibv_devinfo -d rxe0 | grep -E 'hca_id|transport|state|active_mtu|link_layer' | sed 's/^/GOCCL-DEVINFO /'
export PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME=/tmp TMPDIR=/tmp GOCCL_REQUIRE_VERBS=1 GOCCL_IB_HCA==rxe0 ${GOCCL_VM_ENV:-}
while IFS='|' read -r name cmd; do
	[ -n "\$name" ] || continue
	echo "GOCCL-RUN \$name: \$cmd"
	sh -c "\$cmd"
	rc=\$?
	if [ \$rc -eq 0 ]; then echo "GOCCL-RESULT \$name PASS"; else echo "GOCCL-RESULT \$name FAIL exit \$rc"; fi
done </tests.list
echo GOCCL-DONE
sync
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null) >"$work/initrd"
log "initramfs $(du -h "$work/initrd" | cut -f1), kernel $kver"

# 4. Boot.
# TCG by default: on machines of this kind /dev/kvm exists but a guest under
# it fails (MSR errors with -cpu host, no boot with kvm64).
accel=${GOCCL_VM_ACCEL:-tcg}
cpu=(-cpu max)
[[ "$accel" == kvm ]] && cpu=(-cpu host)
nic=(-nic none)
[[ "$netdev" == lo ]] || nic=(-netdev user,id=n0 -device e1000,netdev=n0,romfile=)
console="$work/console.log" # private: runs may overlap
log "booting ($accel)"
set +e
timeout --foreground -k 10 "$vm_timeout" qemu-system-x86_64 -accel "$accel" "${cpu[@]}" -smp 2 -m "${GOCCL_VM_MEM:-2G}" \
	-nographic -no-reboot -monitor none -serial stdio \
	"${nic[@]}" \
	-kernel "$kdir/boot/vmlinuz-$kver" -initrd "$work/initrd" \
	-append "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init" </dev/null >"$console" 2>&1
qrc=$?
set -e
tr -d '\r' <"$console" >"$console.txt"
mv "$console.txt" "$console"
cp "$console" "$cache/console.log.$$" && mv "$cache/console.log.$$" "$cache/console.log"
kept="$cache/console.log"

# 5. Verdict.
elapsed=$(($(date +%s) - start))
# Per-test result lines, benchmark results and the guest's own lines.
grep -E '^ *--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok)$|^GOCCL-|^Benchmark.*(ns/op|B/s)' "$console" || true
npass=$(grep -cE -- '--- PASS' "$console" || true)
nfail=$(grep -cE -- '--- FAIL' "$console" || true)
nskip=$(grep -cE -- '--- SKIP' "$console" || true)
ncmdfail=$(grep -cE '^GOCCL-RESULT .* FAIL' "$console" || true)
nfail=$((nfail + ncmdfail)) # a failed command counts as a failure
fail=0
if ((qrc == 124 || qrc == 137)); then log "timeout after ${vm_timeout}s"; fail=1; fi
grep -q '^GOCCL-DONE' "$console" || { log "the guest did not finish (see $kept)"; fail=1; }
grep -q 'GOCCL-ERROR' "$console" && { log "guest setup failed"; fail=1; }
grep -q 'GOCCL-RESULT .* FAIL' "$console" && fail=1
((nfail > 0 || nskip > 0)) && fail=1
# Proof that the tests ran on Soft-RoCE: the transport's Name() and the
# device the transport opened.
proof=$(grep -hoE 'DEVICE verbs:rxe[0-9]+.*' "$console" | head -n1 || true)
[[ -n "$proof" ]] || proof=$(grep -hoE 'verbs: opened rxe[0-9]+.*' "$console" | head -n1 || true)
if [[ -n "$proof" ]]; then
	echo "softroce-test: rxe proof: $proof"
	# What the multi-process commands printed: each names its transport.
	grep -hE '^\[0\] .* via verbs:' "$console" | sed 's/^/softroce-test: /' || true
else
	log "no test proved it ran on rxe"
	fail=1
fi
if ((fail && npass + nfail == 0)); then
	log "no test result on the console; its end:"
	tail -n 40 "$console" >&2
elif ((fail)); then
	# The log lines of the tests, without the per-connection chatter.
	grep -E '^ +[A-Za-z0-9_]+\.go:[0-9]+: ' "$console" | grep -vE 'verbs: opened|path MTU' | head -n 60 || true
fi
echo "softroce-test: ${elapsed}s in all ($accel, kernel $kver, console $kept)"
echo "softroce-test: $npass passed, $nfail failed, $nskip skipped"
if ((fail)); then
	echo "softroce-test: FAIL"
	exit 1
fi
echo "softroce-test: PASS"
