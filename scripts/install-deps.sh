#!/usr/bin/env bash
# install-deps.sh installs the Debian packages goccl's verbs transport needs to
# run on an RDMA device (hardware or Soft-RoCE), and the tools to test it:
#
#   libibverbs1        libibverbs.so.1, which goccl loads at run time (run)
#   ibverbs-providers  user-space drivers, among them rxe (Soft-RoCE) and mlx5 (run)
#   rdma-core          udev rules, rdma tools, provider config (run)
#   ibverbs-utils      ibv_devices, ibv_devinfo, ibv_rc_pingpong (diagnosis)
#   iproute2           the `rdma` tool (rdma link add rxe0 type rxe netdev ...)
#   gcc                the C toolchain cgo needs (build)
#   libibverbs-dev     rdma-core's headers: not needed to build goccl (it
#                      declares the ABI it uses itself and loads the library at
#                      run time), only by the test that checks those
#                      declarations against the headers (TestABIMatchesHeaders)
#
# A cgo build of goccl needs only gcc; the binary starts on hosts without any
# of the rest and then uses TCP, saying why verbs is off. To use verbs a host
# needs libibverbs1, a provider and an RDMA device.
#
# With --vm it also installs what scripts/softroce-test.sh needs to boot a
# Debian kernel with rdma_rxe in QEMU: qemu-system-x86, busybox-static, cpio.
#
# It is idempotent and quiet: packages already installed are left alone, and
# `apt-get update` runs only when something is missing and the package lists
# are absent or older than a day. It must run as root (or under sudo).
#
# Builds that should not use verbs at all need none of this: build with
# CGO_ENABLED=0 or -tags goccl_noverbs.
set -euo pipefail

pkgs=(libibverbs1 ibverbs-providers rdma-core ibverbs-utils iproute2 gcc libibverbs-dev)
if [[ "${1:-}" == "--vm" ]]; then
	pkgs+=(qemu-system-x86 busybox-static cpio)
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if ((${#missing[@]} == 0)); then
	exit 0
fi

sudo=()
if ((EUID != 0)); then
	sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
lists=/var/lib/apt/lists
if [[ -z "$(find "$lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -n1)" ]]; then
	"${sudo[@]}" flock -w 900 /tmp/goccl-apt.lock apt-get -o DPkg::Lock::Timeout=900 update -qq >/dev/null
fi
echo "install-deps: installing ${missing[*]}" >&2
"${sudo[@]}" flock -w 900 /tmp/goccl-apt.lock apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
