#!/usr/bin/env bash
# Unpacks (never installs) Debian's rdma-core userspace into target/rdma-core, for the verbs tests:
#   usr/include/infiniband/verbs.h   the header exporter/tests/it/verbs.rs checks the binding's layouts against
#   usr/lib/<triplet>/libibverbs.so.1 the real library the exporter loads there (LD_LIBRARY_PATH)
# Installing libibverbs1 would change what the machine is: a node without rdma-core, where the
# probe must report itself unavailable. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=${HPCNODE_RDMA_CORE:-target/rdma-core}
if [ -f "$root/usr/include/infiniband/verbs.h" ] && compgen -G "$root/usr/lib/*/libibverbs.so.1" >/dev/null; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
download() { (cd "$work" && apt-get download -qq libibverbs-dev libibverbs1 2>/dev/null); }
download || { apt-get update -qq && download; }
mkdir -p "$root"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$root"; done
echo "verbs: unpacked $(ls "$work" | tr '\n' ' ')into $root"
