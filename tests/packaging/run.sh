#!/usr/bin/env bash
# The packages as an admin installs them (needs root: a chroot, dpkg and rpm into other roots):
#   packaging/build.sh, then for the .deb and the .rpm: the packaged binary's glibc symbol
#   versions (none above 2.17) and --version; the .deb: lintian without errors, its file list
#   and conffile, installed with dpkg into a fresh Debian 12 root (mmdebstrap) where the postinst
#   creates the user and enables the unit, `systemd-analyze verify` on the installed unit, the
#   flags and checks files kept over a reinstall, and the installed binary run as the service
#   user on a fixture tree, answering a scrape and its check; each package's man page: its
#   sections and a VERSION that is the packaged binary's --version; the .rpm: installed with
#   `rpm --root` into an empty directory, its file list, config files and scriptlets checked,
#   the binary run from there.
#   The rules and dashboards packages: tests/packaging/rules.sh.
#   Each package's unit names its own doc directory, and its generator gives systemd 252 the
#   drop-ins tests/packaging/units.py proves for every target (which runs first).
# Set HPCNODE_PACKAGES_PREBUILT=1 to test the packages already in target/packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
. packaging/tools.sh
if [ "$(id -u)" != 0 ]; then
  if [ "${CI:-}" = true ]; then echo "tests/packaging: CI must run this as root" >&2; exit 1; fi
  echo "tests/packaging: skipped: it needs root (chroot, dpkg --root, rpm --root); CI runs it as root"
  exit 0
fi
work=$(mktemp -d /tmp/hpcnode-packaging.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}" ${root_made:-}; do kill "$pid" 2>/dev/null || true; done
  mountpoint -q "$work/debian/proc" && umount "$work/debian/proc"
  rm -rf "$work"
}
trap cleanup EXIT
step() { echo "tests/packaging: $*"; }
fail() { echo "tests/packaging: FAIL: $*" >&2; exit 1; }
seconds() { echo $((SECONDS - $1))s; }
. tests/packaging/rules.sh

# A Debian 12 root: Essential packages and systemd (its sysusers, deb-systemd-helper and
# systemd-analyze), made once and kept as a tarball under target/ for later runs. mmdebstrap
# waits on the network while the build below uses the CPUs, so the two run side by side.
root_tar=target/packaging-cache/bookworm-systemd.tar
root_part=${root_tar%.tar}.part.tar # mmdebstrap writes a tarball for a name ending in .tar
root_made=
if [ ! -s "$root_tar" ]; then
  mkdir -p "$(dirname "$root_tar")"
  mmdebstrap --quiet --variant=essential --include=systemd bookworm "$root_part" \
    >"$work/mmdebstrap.log" 2>&1 &
  root_made=$!
fi
start=$SECONDS
if [ -z "${HPCNODE_PACKAGES_PREBUILT:-}" ]; then packaging/build.sh x86_64; fi
step "packaging/build.sh: $(seconds "$start")"
version=$(cargo pkgid --quiet -p hpcnode_exporter | sed 's/.*[#@]//')
deb=target/packages/hpcnode-exporter_${version}-1_amd64.deb
rpm=target/packages/hpcnode_exporter-${version}-1.x86_64.rpm

# The binary each package holds: glibc floor and what --version says about it.
check_packaged_binary() {
  local binary=$1 out
  packaging/glibc-floor.sh "$binary" "$GLIBC_FLOOR"
  out=$("$binary" --version)
  grep -qx "glibc floor: $GLIBC_FLOOR" <<<"$out" || fail "$binary --version: no glibc floor $GLIBC_FLOOR: $out"
  grep -qx "target: x86_64-unknown-linux-gnu" <<<"$out" || fail "$binary --version: target: $out"
  grep -qx "revision: $(git rev-parse --short=12 HEAD)" <<<"$out" || fail "$binary --version: revision: $out"
  grep -qx "build date: $(git log -1 --format=%cd --date=format-local:%Y-%m-%d)" <<<"$out" \
    || fail "$binary --version: build date is not the commit's: $out"
}

# The man page a package holds (ROOT: where it is unpacked): the sections an admin looks for,
# the probe subcommand, no groff warning, and a VERSION that reads as the packaged binary's
# --version, line for line.
check_man_page() {
  local root=$1 page section version
  page=$(zcat "$root/usr/share/man/man1/hpcnode_exporter.1.gz")
  for section in OPTIONS SUBCOMMANDS '"EXIT STATUS"' FILES '"SEE ALSO"' VERSION; do
    grep -qx ".SH $section" <<<"$page" || fail "man page: no $section section"
  done
  grep -q '^\.SS "hpcnode_exporter probe verbs' <<<"$page" || fail "man page: no probe verbs"
  grep -q '^\.SS "hpcnode_exporter check' <<<"$page" || fail "man page: no check"
  version=$(groff -man -Tascii -ww -rcR=1 -P-cbou <<<"$page" 2>"$work/groff.log" \
    | awk '/^VERSION$/ {v = 1; next} v && /^$/ {exit} v {sub(/^ +/, ""); print}')
  [ ! -s "$work/groff.log" ] || fail "man page: groff: $(cat "$work/groff.log")"
  [ "$version" = "$("$root/usr/bin/hpcnode_exporter" --version)" ] \
    || fail "man page VERSION differs from the packaged binary's --version: $version"
}

# scrape_fixture SYSFS COMMAND...: starts the exporter (COMMAND) on the procfs fixture's sysfs
# tree (SYSFS, as COMMAND sees it) and checks what a scrape answers.
scrape_fixture() {
  local sysfs=$1 log=$work/exporter.$RANDOM.log address body
  shift
  "$@" --collector.disable-defaults --collector.rdma --collector.modules \
    --path.sysfs="$sysfs" --web.listen-address=127.0.0.1:0 2>"$log" &
  pids+=($!)
  for _ in $(seq 100); do
    address=$(grep -o 'msg=listening address=[0-9.:]*' "$log" | sed 's/.*address=//') && [ -n "$address" ] && break
    kill -0 "${pids[-1]}" 2>/dev/null || fail "exporter exited: $(cat "$log")"
    sleep 0.1
  done
  [ -n "$address" ] || fail "exporter did not listen: $(cat "$log")"
  body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "http://$address/metrics")
  grep -q '^hpcnode_rdma_port_state_id{device="mlx4_0",port="1"} 4$' <<<"$body" || fail "no rdma port state in the scrape: $(head -c 2000 <<<"$body")"
  grep -q '^hpcnode_scrape_collector_success{collector="modules"} 1$' <<<"$body" || fail "modules collector failed: $(grep collector_success <<<"$body")"
  kill "${pids[-1]}"; wait "${pids[-1]}" || true
  step "scrape answered ($(grep -c '^hpcnode_' <<<"$body") samples)"
}

step "the unit and its drop-ins for each target's systemd (tests/packaging/units.py):"
python3 tests/packaging/units.py

# documented_in UNIT FILES: the unit's Documentation= file is one of the package's FILES.
documented_in() {
  local doc
  doc=$(sed -n 's|^Documentation=.*file://\([^ ]*\).*|\1|p' "$1")
  [ -n "$doc" ] && grep -qx "$doc" <<<"$2" || fail "$1 names documentation the package lacks: '$doc'"
}

# --- .deb ---
start=$SECONDS
step "lintian $deb"
lintian --fail-on error --suppress-tags statically-linked-binary "$deb"
step "lintian: $(seconds "$start")"
files=$(dpkg-deb --contents "$deb" | awk '{print $6}' | sed 's|^\./|/|')
for path in /usr/bin/hpcnode_exporter /usr/lib/systemd/system/hpcnode_exporter.service \
  /usr/lib/systemd/system-generators/hpcnode_exporter-generator \
  $(ls packaging/systemd/dropins/*.conf | sed 's|^packaging/systemd/dropins|/usr/share/hpcnode_exporter/systemd|') \
  /usr/lib/sysusers.d/hpcnode_exporter.conf /etc/default/hpcnode_exporter \
  /etc/hpcnode_exporter/checks.yml /usr/share/man/man1/hpcnode_exporter.1.gz /usr/share/doc/hpcnode-exporter/copyright \
  $(ls contrib/slurm/* | sed 's|^contrib/slurm|/usr/share/hpcnode_exporter/slurm|') \
  $(ls README.md METRICS.md docs/*.md alerts/README.md dashboards/README.md | sed 's|^|/usr/share/doc/hpcnode-exporter/|') \
  /usr/share/lintian/overrides/hpcnode-exporter; do
  grep -qx "$path" <<<"$files" || fail "$deb lacks $path"
done
conffiles=$(printf '%s\n' /etc/default/hpcnode_exporter /etc/hpcnode_exporter/checks.yml)
[ "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | sort)" = "$conffiles" ] || fail "conffiles"
mkdir "$work/deb" && dpkg-deb -x "$deb" "$work/deb"
check_packaged_binary "$work/deb/usr/bin/hpcnode_exporter"
check_man_page "$work/deb"
documented_in "$work/deb/usr/lib/systemd/system/hpcnode_exporter.service" "$files"

start=$SECONDS
root=$work/debian
if [ -n "$root_made" ]; then
  wait "$root_made" || { root_made=; fail "mmdebstrap: $(cat "$work/mmdebstrap.log")"; }
  root_made=
  mv "$root_part" "$root_tar"
fi
mkdir "$root" && tar -C "$root" -xf "$root_tar"
step "Debian 12 root (mmdebstrap, waited after the build): $(seconds "$start")"
cp "$deb" "$root/tmp/"
chroot "$root" dpkg -i "/tmp/$(basename "$deb")"
chroot "$root" getent passwd hpcnode_exporter | grep -q ':/usr/sbin/nologin$' || fail "no system user hpcnode_exporter"
[ -L "$root/etc/systemd/system/multi-user.target.wants/hpcnode_exporter.service" ] || fail "unit not enabled"
mount -t proc proc "$root/proc"
# The generator as systemd runs it, into the directory systemd reads at a daemon-reload.
chroot "$root" /usr/lib/systemd/system-generators/hpcnode_exporter-generator /run/systemd/generator
diff <(ls "$root/run/systemd/generator/hpcnode_exporter.service.d") \
  <(packaging/systemd/hpcnode_exporter-generator --list 252 "$(cat /proc/sys/kernel/cap_last_cap)" packaging/systemd/dropins | xargs -n1 basename) \
  || fail "the installed generator's drop-ins for Debian 12's systemd 252"
# --generators=yes runs every generator of the root (the drop-ins are read only then); the
# root's own ones complain of the chroot, so only what concerns this unit counts.
verified=$(chroot "$root" systemd-analyze verify --man=no --generators=yes /usr/lib/systemd/system/hpcnode_exporter.service 2>&1) \
  || fail "systemd-analyze verify: $verified"
! grep hpcnode_exporter <<<"$verified" || fail "systemd-analyze verify: $verified"
step "generator and systemd-analyze verify: no complaint (man page: in the file list above)"
echo 'ARGS="--log.level=debug"' >"$root/etc/default/hpcnode_exporter"
echo '# this site' >>"$root/etc/hpcnode_exporter/checks.yml"
chroot "$root" dpkg -i "/tmp/$(basename "$deb")"
grep -qx 'ARGS="--log.level=debug"' "$root/etc/default/hpcnode_exporter" || fail "/etc/default/hpcnode_exporter not kept over a reinstall"
grep -qx '# this site' "$root/etc/hpcnode_exporter/checks.yml" || fail "/etc/hpcnode_exporter/checks.yml not kept over a reinstall"
cp -r tests/fixtures/procfs "$root/fixture"
scrape_fixture /fixture/sys chroot --userspec=hpcnode_exporter:hpcnode_exporter "$root" /usr/bin/hpcnode_exporter
# The installed check with the installed checks file, as the service user: the fixture's ports
# are up (exit 0, nothing on stdout); its first port taken down fails it (exit 1, its line).
checked=$(chroot --userspec=hpcnode_exporter:hpcnode_exporter "$root" /usr/bin/hpcnode_exporter check \
  --collector.disable-defaults --collector.rdma --path.sysfs=/fixture/sys) || fail "check on the fixture: $?"
[ -z "$checked" ] || fail "check on the fixture printed: $checked"
echo '1: DOWN' >"$root/fixture/sys/class/infiniband/mlx4_0/ports/1/state"
code=0; checked=$(chroot --userspec=hpcnode_exporter:hpcnode_exporter "$root" /usr/bin/hpcnode_exporter check \
  --collector.disable-defaults --collector.rdma --path.sysfs=/fixture/sys) || code=$?
[ "$code" = 1 ] && [ "$checked" = 'ERROR: hpcnode: rdma_port_state mlx4_0/1: port state 1 (DOWN), not ACTIVE' ] \
  || fail "check with a port down: exit $code: $checked"
step "the installed check and checks file: 0 on the fixture, 1 and its line with a port down"
check_rules_deb "$root"

# --- .rpm ---
rpmroot=$work/rpmroot
mkdir "$rpmroot"
rpm --root "$rpmroot" --initdb
rpm --root "$rpmroot" --install --nodeps --noscripts "$rpm"
expected_rpm_files="/etc/sysconfig/hpcnode_exporter
/etc/hpcnode_exporter
/etc/hpcnode_exporter/checks.yml
/usr/bin/hpcnode_exporter
/usr/lib/systemd/system/hpcnode_exporter.service
/usr/lib/systemd/system-generators/hpcnode_exporter-generator
/usr/lib/sysusers.d/hpcnode_exporter.conf
$(ls packaging/systemd/dropins/*.conf | sed 's|^packaging/systemd/dropins|/usr/share/hpcnode_exporter/systemd|')
/usr/share/hpcnode_exporter
/usr/share/hpcnode_exporter/systemd
/usr/share/hpcnode_exporter/slurm
$(ls contrib/slurm/* | sed 's|^contrib/slurm|/usr/share/hpcnode_exporter/slurm|')
$(ls README.md METRICS.md docs/*.md alerts/README.md dashboards/README.md | sed 's|^|/usr/share/doc/hpcnode_exporter/|')
/usr/share/doc/hpcnode_exporter/alerts
/usr/share/doc/hpcnode_exporter/dashboards
/usr/share/doc/hpcnode_exporter/docs
/usr/share/licenses/hpcnode_exporter/LICENSE
/usr/share/man/man1/hpcnode_exporter.1.gz"
diff <(sort <<<"$expected_rpm_files") <(rpm --root "$rpmroot" -ql hpcnode_exporter | sort) || fail "rpm file list"
[ "$(rpm --root "$rpmroot" -qc hpcnode_exporter | sort)" = "$(printf '%s\n' /etc/hpcnode_exporter/checks.yml /etc/sysconfig/hpcnode_exporter)" ] || fail "rpm config files"
documented_in "$rpmroot/usr/lib/systemd/system/hpcnode_exporter.service" "$(rpm --root "$rpmroot" -ql hpcnode_exporter)"
rpm --root "$rpmroot" -q --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' hpcnode_exporter | grep -qx 'cn /etc/sysconfig/hpcnode_exporter' \
  || fail "/etc/sysconfig/hpcnode_exporter is not %config(noreplace)"
rpm --root "$rpmroot" -q --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' hpcnode_exporter | grep -qx 'cn /etc/hpcnode_exporter/checks.yml' \
  || fail "/etc/hpcnode_exporter/checks.yml is not %config(noreplace)"
rpm --root "$rpmroot" -V --nodeps hpcnode_exporter || fail "rpm -V: installed files differ from the package"
scripts=$(rpm -qp --scripts "$rpm")
for expected in 'systemd-sysusers hpcnode_exporter.conf' 'systemctl daemon-reload' 'systemctl --no-reload preset hpcnode_exporter.service' \
  'systemctl --no-reload disable --now hpcnode_exporter.service' 'systemctl try-restart hpcnode_exporter.service'; do
  grep -qF "$expected" <<<"$scripts" || fail "rpm scriptlets lack '$expected': $scripts"
done
for scriptlet in POSTIN PREUN POSTUN; do
  body=$(rpm -qp --qf "%{$scriptlet}" "$rpm")
  [ "$body" != "(none)" ] && sh -n <<<"$body" || fail "rpm $scriptlet scriptlet missing or not valid sh: $body"
done
check_packaged_binary "$rpmroot/usr/bin/hpcnode_exporter"
check_man_page "$rpmroot"
# The root holds no libc: the binary runs on the host's, as one from a .rpm would on RHEL.
scrape_fixture "$PWD/tests/fixtures/procfs/sys" "$rpmroot/usr/bin/hpcnode_exporter"
check_rules_rpm
step "passed"
