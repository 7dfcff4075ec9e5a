#!/usr/bin/env bash
# install-deps.sh installs the Debian packages goccl's verbs transport needs to
# build with cgo and to run on an RDMA device (hardware or Soft-RoCE):
#
#   libibverbs-dev     verbs headers and libibverbs.so (build: cgo)
#   rdma-core          udev rules, rdma tools, provider config (run)
#   ibverbs-providers  user-space drivers, among them rxe (Soft-RoCE) and mlx5 (run)
#   ibverbs-utils      ibv_devices, ibv_devinfo, ibv_rc_pingpong (diagnosis)
#   iproute2           the `rdma` tool (rdma link add rxe0 type rxe netdev ...)
#   gcc, pkg-config    the C toolchain cgo needs
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

pkgs=(libibverbs-dev rdma-core ibverbs-providers ibverbs-utils iproute2 gcc pkg-config)
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
	"${sudo[@]}" apt-get update -qq >/dev/null
fi
echo "install-deps: installing ${missing[*]}" >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
