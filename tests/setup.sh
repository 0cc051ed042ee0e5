#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian 12 machine (as root). Idempotent.
#   prometheus, promtool   exposition lint, rule checks and unit tests, the end-to-end server
#   python3-prometheus-client  the reference OpenMetrics parser
#   python3-fusepy fuse3   a FUSE file that never answers a read (a wedged driver)
#   prometheus-node-exporter  the peer the benchmark runs side by side
#   clang llvm             rebuild the eBPF probes (ebpf/build.sh --check compares with the committed objects)
#   qemu-system-x86 busybox-static kmod cpio xz-utils zstd iproute2  the kernel lab (tests/lab): boots
#                          Debian kernels under TCG in a busybox initramfs; gcc libc6-dev build its static
#                          guest helpers (tests/lab/helpers)
#   victoria-metrics       the fleet end-to-end test (tests/fleet): victoria-metrics (single node) and
#                          vmalert, both in Debian's package
#   netbase                /etc/services, which the default port must not be in
#   nodejs npm             the dashboards' type check against @grafana/schema (tests/grafana_schema)
#   slurmctld slurmd slurm-client munge  a real one-node Slurm 22.05 cluster (tests/slurm): the job
#                          cgroups the exporter attributes, the health check and prolog glue
#   rpm mmdebstrap lintian systemd python3-venv  the packages (packaging/build.sh: rpmbuild; Zig from
#                          PyPI in a venv) and their install tests (tests/packaging: a Debian root,
#                          rpm --root, lintian, systemd-analyze)
set -euo pipefail
packages=(prometheus python3-prometheus-client python3-fusepy fuse3 prometheus-node-exporter python3-yaml clang llvm
  qemu-system-x86 busybox-static kmod cpio xz-utils zstd iproute2 gcc libc6-dev
  rpm mmdebstrap lintian systemd python3-venv victoria-metrics nodejs netbase
  slurmctld slurmd slurm-client munge)
# A nodejs from elsewhere (NodeSource) bundles npm and conflicts with Debian's npm package.
command -v npm >/dev/null || packages+=(npm)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The prometheus package starts its own server on :9090 where an init system runs; the
  # tests start their own on free ports, so a policy-rc.d keeps package scripts from starting services.
  created_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}" >/dev/null
  if [ -n "$created_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi
# packaging/build.sh's tools, each installed only when absent: Zig and cargo-zigbuild from PyPI
# (the glibc 2.17 binary) and cargo's .deb packager. The .rpm is rpmbuild's (the rpm package
# above): cargo-generate-rpm would add minutes of compiling to CI for what a spec file does.
. "$(dirname "$0")/../packaging/tools.sh"
installed=$("$ZIGLANG_VENV/bin/pip" freeze 2>/dev/null | grep -cxF -f <(printf '%s\n' "${PYPI_TOOLS[@]}") || true)
if [ "$installed" != "${#PYPI_TOOLS[@]}" ]; then
  echo "setup: installing ${PYPI_TOOLS[*]} into $ZIGLANG_VENV"
  /usr/bin/python3 -m venv "$ZIGLANG_VENV"
  "$ZIGLANG_VENV/bin/pip" install --quiet --disable-pip-version-check "${PYPI_TOOLS[@]}"
fi
for tool in "${CARGO_TOOLS[@]}"; do
  if ! cargo "${tool%%@*}" --version 2>/dev/null | grep -qF "${tool##*@}"; then
    echo "setup: cargo install $tool"
    cargo install --locked --quiet "cargo-$tool"
  fi
done
# The verbs tests' rdma-core header and library, unpacked under target/ (not installed).
"$(dirname "$0")/../exporter/tests/support/fetch-rdma-core.sh"
# The rdma_userspace tests' two rdma-core generations (bookworm's and bullseye's libraries), unpacked the same way.
"$(dirname "$0")/../exporter/tests/support/fetch-rdma-userspace.sh"
