#!/usr/bin/env bash
# Downloads (never installs) the Debian kernels and the guest userspace packages the lab needs,
# and unpacks each into the cache once. Prints nothing but progress on stderr.
#   fetch.sh kernel SERIES   -> prints the unpacked root (ROOT/boot/vmlinuz-KVER, ROOT/lib/modules/KVER)
#   fetch.sh userspace       -> prints the unpacked root of the verbs userspace packages
# Versions are resolved through the meta packages each run (the security archive rotates ABI
# versions); a package already in the cache is not downloaded again.
set -euo pipefail
cache=${HPCNODE_LAB_CACHE:-"$(cd "$(dirname "$0")" && pwd)/.cache"}
mkdir -p "$cache/debs"
# One fetch at a time per cache: kernels are prepared in parallel, and two unpacks of the shared
# userspace root (one removing what the other extracts) or two apt runs on one lists folder fail.
exec 9> "$cache/.fetch.lock"
flock 9
# apt options: none for the host's own suite (bookworm); a private sources list, package lists
# and cache under $cache for another suite (bullseye's 5.10), leaving the host's apt untouched.
apt_options=()
use_suite() {
  local suite=$1 state=$cache/apt-$1 keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  mkdir -p "$state/lists/partial" "$state/archives/partial"
  printf 'deb [signed-by=%s] http://deb.debian.org/debian %s main\ndeb [signed-by=%s] http://deb.debian.org/debian-security %s-security main\n' \
    "$keyring" "$suite" "$keyring" "$suite" > "$state/sources.list"
  apt_options=(-o Dir::Etc::sourcelist="$state/sources.list" -o Dir::Etc::sourceparts=/nonexistent
    -o Dir::State::Lists="$state/lists" -o Dir::Cache="$state" -o Dir::Cache::archives="$state/archives"
    -o Dir::State::status=/dev/null)
}

# The package a meta package depends on, e.g. linux-image-6.12-amd64 -> linux-image-6.12.117+deb12-amd64.
resolve_meta() {
  local meta=$1 target
  target=$(apt-cache "${apt_options[@]}" depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
  if [ -z "$target" ]; then
    echo "lab: $meta unknown to apt, running apt-get update" >&2
    apt-get "${apt_options[@]}" -o APT::Sandbox::User=root update -qq >&2
    target=$(apt-cache "${apt_options[@]}" depends "$meta" | awk '/Depends: linux-image-/ {print $2; exit}')
  fi
  [ -n "$target" ] || { echo "lab: cannot resolve $meta" >&2; return 1; }
  echo "$target"
}

# Downloads each PACKAGE's candidate version into the cache unless already there; prints the
# .deb paths. One apt-cache call for all: each costs half a second.
download() {
  local package version deb
  apt-cache "${apt_options[@]}" policy "$@" | awk '/^[^ ].*:$/ {package = substr($0, 1, length($0) - 1)} /Candidate:/ {print package, $2}' |
    while read -r package version; do
      [ "$version" != "(none)" ] || { echo "lab: no candidate for $package" >&2; return 1; }
      # apt-get download names the file with the version's ':' escaped as %3a.
      deb="$cache/debs/${package}_${version//:/%3a}_amd64.deb"
      if [ ! -s "$deb" ]; then
        echo "lab: downloading $package $version" >&2
        (cd "$cache/debs" && apt-get "${apt_options[@]}" download -q -o APT::Sandbox::User=root "$package=$version" >&2)
      fi
      [ -s "$deb" ] || { echo "lab: download of $package left no $deb" >&2; return 1; }
      echo "$deb"
    done
}

# Unpacks the given .debs into ROOT once; the stamp names the exact files, so a new version re-unpacks.
unpack() {
  local root=$1 stamp deb
  shift
  stamp=$(printf '%s\n' "$@" | xargs -n1 basename | sort)
  if [ -f "$root/.unpacked" ] && [ "$(cat "$root/.unpacked")" = "$stamp" ]; then return; fi
  rm -rf "$root"
  mkdir -p "$root"
  for deb in "$@"; do dpkg -x "$deb" "$root"; done
  echo "$stamp" > "$root/.unpacked"
}

case ${1:-} in
  kernel)
    series=${2:?series}
    case $series in
      6.12) meta=linux-image-6.12-amd64 ;;
      6.1) meta=linux-image-amd64 ;; # bookworm's default kernel is the 6.1 series
      5.10) meta=linux-image-amd64; use_suite bullseye ;; # and bullseye's the 5.10 series
      *) echo "lab: unknown kernel series $series (6.12, 6.1 or 5.10)" >&2; exit 2 ;;
    esac
    package=$(resolve_meta "$meta")
    case $package in linux-image-"$series"*) ;; *) echo "lab: $meta resolved to $package, not $series" >&2; exit 1 ;; esac
    deb=$(download "$package")
    root="$cache/kernel-$series"
    unpack "$root" "$deb"
    kver=$(ls "$root/lib/modules")
    # The deb has no modules.dep.
    [ -f "$root/lib/modules/$kver/modules.dep" ] || depmod -b "$root" "$kver"
    echo "$root"
    ;;
  userspace)
    # rdma-core's verbs stack and tools; libnl is what libibverbs links, absent from a minimal host.
    mapfile -t debs < <(download libibverbs1 ibverbs-providers ibverbs-utils perftest libibumad3 \
      librdmacm1 libpci3 rdmacm-utils libnl-3-200 libnl-route-3-200)
    ((${#debs[@]} == 10)) || { echo "lab: userspace packages missing" >&2; exit 1; }
    root="$cache/userspace"
    unpack "$root" "${debs[@]}"
    echo "$root"
    ;;
  *) echo "usage: fetch.sh kernel 6.12|6.1|5.10 | fetch.sh userspace" >&2; exit 2 ;;
esac
