#!/usr/bin/env bash
# packaging/build-rules.sh [OUT [REVISION]]: the rules and dashboards for the host that runs
# Prometheus and Grafana, architecture-independent, in OUT (target/packages by default):
#   hpcnode-exporter-rules_<version>-<revision>_all.deb   (dpkg-deb: cargo-deb builds only a binary's arch)
#   hpcnode_exporter-rules-<version>-<revision>.noarch.rpm (rpmbuild, packaging/rules/hpcnode_exporter-rules.spec)
# REVISION (1 by default): tests/packaging builds a newer one to upgrade to. packaging/build.sh
# runs this. The thresholds (alerts/config.rules.yml) and the Grafana provisioning file go to
# /etc, where dpkg (conffiles) and rpm (%config(noreplace)) keep a site's edits on upgrade: dpkg
# asks only when the package's copy changed too (dpkg(1), --force-confold), rpm then writes the
# package's copy beside the site's as .rpmnew (rpm's %config(noreplace); tests/packaging/rules.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/packages}
revision=${2:-1}
version=$(cargo pkgid --quiet -p hpcnode_exporter | sed 's/.*[#@]//')
mkdir -p "$out"
out=$(realpath "$out")
staging=$out/rules-staging
rm -rf "$staging"

# stage ROOT DOC: what both packages install, the documents in DOC (each format's own doc dir).
stage() {
  local root=$1 doc=$1/usr/share/doc/$2 rules
  install -D -m 0644 alerts/config.rules.yml "$root/etc/hpcnode_exporter/rules/config.rules.yml"
  # Grafana's packages read provisioning files from /etc/grafana/provisioning/ (grafana.com:
  # "Provision Grafana"); this one's path: is /usr/share/hpcnode_exporter/dashboards.
  install -D -m 0644 dashboards/provisioning/hpcnode.yml "$root/etc/grafana/provisioning/dashboards/hpcnode.yml"
  rules=$(ls alerts/*.rules.yml | grep -vxF alerts/config.rules.yml)
  install -D -m 0644 -t "$root/usr/share/hpcnode_exporter/rules" $rules
  install -D -m 0644 -t "$root/usr/share/hpcnode_exporter/dashboards" dashboards/*.json
  # The documents keep the repository's layout, so the links between them hold.
  install -D -m 0644 -t "$doc" METRICS.md
  install -D -m 0644 -t "$doc/alerts" alerts/README.md
  install -D -m 0644 -t "$doc/dashboards" dashboards/README.md
}

# .deb
deb=$staging/deb
stage "$deb" hpcnode-exporter-rules
install -m 0644 packaging/debian/copyright "$deb/usr/share/doc/hpcnode-exporter-rules/copyright"
gzip -9 -n -c packaging/rules/changelog >"$deb/usr/share/doc/hpcnode-exporter-rules/changelog.Debian.gz"
mkdir "$deb/DEBIAN"
(cd "$deb" && find etc -type f | sed 's|^|/|' | sort) >"$deb/DEBIAN/conffiles"
(cd "$deb" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$deb/DEBIAN/md5sums"
sed -e "s/@VERSION@/$version-$revision/" -e "s/@SIZE@/$(du -sk --exclude=DEBIAN "$deb" | cut -f1)/" \
  packaging/rules/control >"$deb/DEBIAN/control"
dpkg-deb --root-owner-group -Zxz --build "$deb" "$out/hpcnode-exporter-rules_${version}-${revision}_all.deb" >/dev/null

# .rpm
rpm=$staging/rpm
stage "$rpm" hpcnode_exporter-rules
install -D -m 0644 LICENSE "$rpm/usr/share/licenses/hpcnode_exporter-rules/LICENSE"
rpmbuild --quiet -bb packaging/rules/hpcnode_exporter-rules.spec \
  --define "_topdir $out/rpmbuild" --define "_rpmdir $out" \
  --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
  --define "staging $rpm" --define "version $version" --define "release $revision" \
  ${SOURCE_DATE_EPOCH:+--define "clamp_mtime_to_source_date_epoch 1"}
rm -rf "$staging"
ls -l "$out"/hpcnode-exporter-rules_"${version}-${revision}"_all.deb "$out"/hpcnode_exporter-rules-"${version}-${revision}".noarch.rpm
