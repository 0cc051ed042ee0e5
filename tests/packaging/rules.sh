# Sourced by tests/packaging/run.sh (its step, fail, $work and $version): the rules and
# dashboards packages, for the host that runs Prometheus and Grafana (packaging/build-rules.sh).

# The site's files, kept on upgrade; everything else is replaced.
rules_conffiles="/etc/grafana/provisioning/dashboards/hpcnode.yml
/etc/hpcnode_exporter/rules/config.rules.yml"
thresholds=/etc/hpcnode_exporter/rules/config.rules.yml

# check_rules_installed ROOT: the files as Prometheus and Grafana on that host read them.
check_rules_installed() {
  local root=$1 block out rule_files
  rule_files=$(ls alerts/*.rules.yml | wc -l)
  # Every Prometheus configuration the documents give, with its rule_files globs, read by promtool
  # inside ROOT: the globs find every rule file once (the thresholds in /etc only) and each passes.
  cp "$(command -v promtool)" "$root/tmp/promtool"
  python3 tests/packaging/prometheus_configs.py README.md alerts/README.md "$root/tmp/prometheus"
  for block in "$root"/tmp/prometheus.*.yml; do
    out=$(chroot "$root" /tmp/promtool check config "/tmp/$(basename "$block")") || fail "promtool check config: $out"
    grep -qx "  SUCCESS: $rule_files rule files found" <<<"$out" \
      || fail "the documents' rule_files do not find the $rule_files rule files: $out"
    [ "$(grep -c '^  SUCCESS: [0-9]* rules found$' <<<"$out")" = "$rule_files" ] || fail "promtool: $out"
  done
  step "promtool check config: the documents' rule_files load the $rule_files installed rule files"
  python3 tests/packaging/grafana_provisioning.py "$root" /etc/grafana/provisioning/dashboards/hpcnode.yml \
    dashboards/*.json || fail "the installed provisioning file"
}

check_rules_deb() {
  local root=$1 rules_deb=target/packages/hpcnode-exporter-rules_${version}-1_all.deb newer installed
  [ -s "$rules_deb" ] || fail "no $rules_deb (packaging/build-rules.sh)"
  [ "$(dpkg-deb --field "$rules_deb" Architecture)" = all ] || fail "$rules_deb: not Architecture: all"
  lintian --fail-on error "$rules_deb"
  [ "$(dpkg-deb --ctrl-tarfile "$rules_deb" | tar -xO ./conffiles)" = "$rules_conffiles" ] || fail "$rules_deb: conffiles"
  # Beside hpcnode-exporter: dpkg refuses a file two packages hold.
  cp "$rules_deb" "$root/tmp/"
  chroot "$root" dpkg -i "/tmp/$(basename "$rules_deb")"
  check_rules_installed "$root"
  # A newer package over a site's edit: dpkg keeps the edit without asking (stdin closed: a
  # conffile prompt would fail the install).
  sed -i 's/vector(0.8)$/vector(0.85)/' "$root$thresholds"
  packaging/build-rules.sh "$work/rules-2" 2 >/dev/null
  newer=$(ls "$work"/rules-2/hpcnode-exporter-rules_*_all.deb)
  cp "$newer" "$root/tmp/"
  chroot "$root" dpkg -i "/tmp/$(basename "$newer")" </dev/null
  installed=$(chroot "$root" dpkg-query -W -f '${Version}' hpcnode-exporter-rules)
  [ "$installed" = "$version-2" ] || fail "hpcnode-exporter-rules $installed installed, not the upgrade $version-2"
  grep -q 'vector(0.85)$' "$root$thresholds" || fail "$thresholds: the site's edit lost on upgrade"
  step "rules .deb: lintian, conffiles, installed beside the exporter, edited $thresholds kept over an upgrade"
}

check_rules_rpm() {
  local rules_rpm=target/packages/hpcnode_exporter-rules-${version}-1.noarch.rpm rpmroot=$work/rules-rpmroot expected
  [ -s "$rules_rpm" ] || fail "no $rules_rpm (packaging/build-rules.sh)"
  mkdir "$rpmroot"
  rpm --root "$rpmroot" --initdb
  rpm --root "$rpmroot" --install --nodeps "$rules_rpm"
  expected="$rules_conffiles
/etc/hpcnode_exporter
/etc/hpcnode_exporter/rules
$(ls METRICS.md alerts/README.md dashboards/README.md | sed 's|^|/usr/share/doc/hpcnode_exporter-rules/|')
/usr/share/doc/hpcnode_exporter-rules
/usr/share/doc/hpcnode_exporter-rules/alerts
/usr/share/doc/hpcnode_exporter-rules/dashboards
/usr/share/hpcnode_exporter
/usr/share/hpcnode_exporter/dashboards
/usr/share/hpcnode_exporter/rules
$(ls dashboards/*.json alerts/*.rules.yml | grep -vxF alerts/config.rules.yml |
    sed 's|^dashboards|/usr/share/hpcnode_exporter/dashboards|; s|^alerts|/usr/share/hpcnode_exporter/rules|')
/usr/share/licenses/hpcnode_exporter-rules/LICENSE"
  diff <(sort <<<"$expected") <(rpm --root "$rpmroot" -ql hpcnode_exporter-rules | sort) || fail "rules rpm file list"
  [ "$(rpm --root "$rpmroot" -q --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' hpcnode_exporter-rules | grep '^c')" \
    = "$(sed 's/^/cn /' <<<"$rules_conffiles")" ] || fail "rules rpm: config files not exactly the %config(noreplace) $rules_conffiles"
  [ "$(rpm -qp --qf '%{ARCH}' "$rules_rpm")" = noarch ] || fail "$rules_rpm: not noarch"
  sed -i 's/vector(0.8)$/vector(0.85)/' "$rpmroot$thresholds"
  rpm --root "$rpmroot" --upgrade --nodeps "$(ls "$work"/rules-2/hpcnode_exporter-rules-*.noarch.rpm)"
  [ "$(rpm --root "$rpmroot" -q --qf '%{RELEASE}' hpcnode_exporter-rules)" = 2 ] || fail "rules rpm: not upgraded"
  grep -q 'vector(0.85)$' "$rpmroot$thresholds" || fail "$thresholds: the site's edit lost on rpm -U"
  step "rules .rpm: noarch, file list, %config(noreplace), edited $thresholds kept over rpm -U"
}
