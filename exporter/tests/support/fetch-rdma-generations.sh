#!/usr/bin/env bash
# Unpacks (never installs) two generations of Debian's rdma-core userspace into
# target/rdma-generations/<release>/, the real files the provider tests build their roots from:
#   bookworm  rdma-core 44.0-2 (private ABI IBVERBS_PRIVATE_34), from this machine's apt sources
#   bullseye  rdma-core 33.2-1 (private ABI IBVERBS_PRIVATE_33),
#             from deb.debian.org's pool: not in a Debian 12 machine's apt sources
# Each: libibverbs1, ibverbs-providers, librdmacm1, libibumad3. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=${HPCNODE_RDMA_GENERATIONS:-target/rdma-generations}
packages=(libibverbs1 ibverbs-providers librdmacm1 libibumad3)
pool=http://deb.debian.org/debian/pool/main/r/rdma-core
unpacked() { compgen -G "$1/usr/lib/*/libibverbs.so.1" >/dev/null && compgen -G "$1/usr/lib/*/libibverbs/libmlx5-rdmav*.so" >/dev/null; }
unpack() {
  local dest=$1 work=$2
  mkdir -p "$dest"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$dest"; done
  echo "rdma-generations: unpacked $(cd "$work" && ls | tr '\n' ' ')into $dest"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! unpacked "$root/bookworm"; then
  mkdir -p "$work/bookworm"
  download() { (cd "$work/bookworm" && apt-get download -qq "${packages[@]}" 2>/dev/null); }
  download || { apt-get update -qq && download; }
  unpack "$root/bookworm" "$work/bookworm"
fi
if ! unpacked "$root/bullseye"; then
  mkdir -p "$work/bullseye"
  # The file names as bullseye's Packages index gives them (Filename:), version 33.2-1.
  for package in "${packages[@]}"; do
    curl -fsSL --retry 3 -o "$work/bullseye/${package}_33.2-1_amd64.deb" "$pool/${package}_33.2-1_amd64.deb"
  done
  unpack "$root/bullseye" "$work/bullseye"
fi
