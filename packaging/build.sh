#!/usr/bin/env bash
# packaging/build.sh [ARCH...]: the portable binary and its packages in target/packages/:
#   hpcnode-exporter_<version>_<debian arch>.deb   (cargo-deb)
#   hpcnode_exporter-<version>-1.<arch>.rpm        (rpmbuild, from packaging/hpcnode_exporter.spec)
#   and the rules and dashboards for the Prometheus host, by packaging/build-rules.sh
# ARCH: x86_64 (the default) or aarch64. The binary is built with cargo-zigbuild against glibc
# 2.17 symbols, so one build runs on RHEL 7 and everything newer; packaging/glibc-floor.sh
# refuses it if it needs more. The man page states the packaged binary's --version, so it runs
# that binary: aarch64 on an x86_64 host needs binfmt_misc to run it (qemu-user-static).
# Tools: tests/setup.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
. packaging/tools.sh
out=target/packages
version=$(cargo pkgid --quiet -p hpcnode_exporter | sed 's/.*[#@]//')
mkdir -p "$out/man"

# The man page's generator, a host build (before the environment below, so the debug build the
# tests use is not rebuilt); it runs below on each packaged binary, whose --version it states.
cargo build --locked --quiet --example man

export PATH="$ZIGLANG_VENV/bin:$PATH"
export HPCNODE_GLIBC_FLOOR=$GLIBC_FLOOR
# Reproducible: the build date --version prints is the commit's.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null) && export SOURCE_DATE_EPOCH
# Symbols stripped at link time: zig's linker can, and no host strip is needed per architecture.
export CARGO_PROFILE_RELEASE_STRIP=symbols

for arch in "${@:-x86_64}"; do
  case $arch in
    x86_64) deb_arch=amd64 ;;
    aarch64) deb_arch=arm64 ;;
    *) echo "packaging/build.sh: unknown architecture $arch (x86_64 or aarch64)" >&2; exit 2 ;;
  esac
  triple=$arch-unknown-linux-gnu
  cargo zigbuild --locked --release --bin hpcnode_exporter --target "$triple.$GLIBC_FLOOR"
  binary=target/$triple/release/hpcnode_exporter
  packaging/glibc-floor.sh "$binary" "$GLIBC_FLOOR"
  target/debug/examples/man "$binary" >"$out/man/hpcnode_exporter.1"
  gzip -9 -n -f "$out/man/hpcnode_exporter.1"

  cargo deb --locked --no-build --no-strip -p hpcnode_exporter --target "$triple" \
    --output "$out/hpcnode-exporter_${version}-1_$deb_arch.deb"

  staging=$out/rpm-staging/$arch
  rm -rf "$staging"
  install -D -m 0755 "$binary" "$staging/usr/bin/hpcnode_exporter"
  # The unit names the .rpm's doc directory, not the .deb's (hpcnode-exporter, Debian's name).
  sed 's|/usr/share/doc/hpcnode-exporter/|/usr/share/doc/hpcnode_exporter/|' packaging/hpcnode_exporter.service \
    | install -D -m 0644 /dev/stdin "$staging/usr/lib/systemd/system/hpcnode_exporter.service"
  install -D -m 0755 -t "$staging/usr/lib/systemd/system-generators" packaging/systemd/hpcnode_exporter-generator
  install -D -m 0644 -t "$staging/usr/share/hpcnode_exporter/systemd" packaging/systemd/dropins/*.conf
  install -D -m 0644 packaging/sysusers.d/hpcnode_exporter.conf "$staging/usr/lib/sysusers.d/hpcnode_exporter.conf"
  install -D -m 0644 packaging/defaults "$staging/etc/sysconfig/hpcnode_exporter"
  install -D -m 0644 packaging/checks.yml "$staging/etc/hpcnode_exporter/checks.yml"
  install -D -m 0755 -t "$staging/usr/share/hpcnode_exporter/slurm" contrib/slurm/hpcnode-healthcheck contrib/slurm/prolog-verbs-probe
  install -D -m 0644 -t "$staging/usr/share/hpcnode_exporter/slurm" contrib/slurm/hpcnode.nhc
  install -D -m 0644 "$out/man/hpcnode_exporter.1.gz" "$staging/usr/share/man/man1/hpcnode_exporter.1.gz"
  # The documents keep the repository's layout, so their relative links hold.
  install -D -m 0644 -t "$staging/usr/share/doc/hpcnode_exporter" README.md METRICS.md
  install -D -m 0644 -t "$staging/usr/share/doc/hpcnode_exporter/docs" docs/*.md
  install -D -m 0644 -t "$staging/usr/share/doc/hpcnode_exporter/alerts" alerts/README.md
  install -D -m 0644 -t "$staging/usr/share/doc/hpcnode_exporter/dashboards" dashboards/README.md
  install -D -m 0644 LICENSE "$staging/usr/share/licenses/hpcnode_exporter/LICENSE"
  rpmbuild --quiet -bb packaging/hpcnode_exporter.spec --target "$arch" \
    --define "_topdir $PWD/$out/rpmbuild" --define "_rpmdir $PWD/$out" \
    --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
    --define "staging $PWD/$staging" --define "version $version" \
    ${SOURCE_DATE_EPOCH:+--define "clamp_mtime_to_source_date_epoch 1"} \
    --define "__os_install_post %{nil}" --define "debug_package %{nil}"
done
packaging/build-rules.sh "$out"
ls -l "$out"/*.deb "$out"/*.rpm
