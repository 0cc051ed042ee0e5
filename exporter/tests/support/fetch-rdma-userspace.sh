#!/usr/bin/env bash
# Unpacks (never installs) two generations of Debian's rdma-core userspace libraries into
# target/rdma-userspace/{bookworm,bullseye}, the files the rdma_userspace tests build their roots
# from (exporter/tests/it/rdma_userspace.rs, the ld_cache unit tests):
#   bookworm  rdma-core 44.0-2 (libibverbs.so.1.14.44.0), from this machine's apt sources
#   bullseye  rdma-core 33.2-1 (libibverbs.so.1.11.33.2), from the Debian pool by file name and
#             SHA256 as bullseye's main/binary-amd64/Packages.xz lists them
# Installing them would change what the machine is. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=${HPCNODE_RDMA_USERSPACE:-target/rdma-userspace}
packages=(libibverbs1 ibverbs-providers librdmacm1 libibumad3)
if compgen -G "$root/bookworm/usr/lib/*/libibverbs.so.1.14.44.0" >/dev/null \
  && compgen -G "$root/bullseye/usr/lib/*/libibverbs.so.1.11.33.2" >/dev/null; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bookworm" "$work/bullseye"
download() { (cd "$work/bookworm" && apt-get download -qq "${packages[@]/%/=44.0-2}" 2>/dev/null); }
download || { apt-get update -qq && download; }
pool=http://deb.debian.org/debian/pool/main/r/rdma-core
while read -r sha file; do
  curl -fsS --retry 3 -o "$work/bullseye/$file" "$pool/$file"
  echo "$sha  $work/bullseye/$file" | sha256sum --check --quiet
done <<'LIST'
47ae2856a6ef00897888e4853f405758309627930ec040482c4c97d9c77536ee libibverbs1_33.2-1_amd64.deb
c3f04bde60ef4b0ce78c378985ab2ea03f1e6db3ae3aa78ecb07495c5e615ae6 ibverbs-providers_33.2-1_amd64.deb
2746674bba1d935fe3b378f1c43efab425a86dd480de0613fda516d547a07de6 librdmacm1_33.2-1_amd64.deb
d24c458231caba7cb6a034f090849257645061e84173b1b74430a0738420874d libibumad3_33.2-1_amd64.deb
LIST
for release in bookworm bullseye; do
  rm -rf "${root:?}/$release"
  mkdir -p "$root/$release"
  for deb in "$work/$release"/*.deb; do dpkg-deb -x "$deb" "$root/$release"; done
done
echo "rdma_userspace: unpacked $(cd "$work" && ls bookworm bullseye | tr '\n' ' ')into $root"
