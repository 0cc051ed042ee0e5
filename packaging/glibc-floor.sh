#!/usr/bin/env bash
# packaging/glibc-floor.sh BINARY FLOOR: reads the GLIBC_x.y versions of BINARY's dynamic
# symbols (what the dynamic loader checks at start), prints the highest, and fails if it is
# above FLOOR (e.g. 2.17), naming the symbols that need more.
set -euo pipefail
binary=$1 floor=$2
symbols=$(readelf --dyn-syms --wide "$binary")
versions=$(grep -o 'GLIBC_[0-9][0-9.]*' <<<"$symbols" | sed 's/^GLIBC_//' | sort -u -V)
if [ -z "$versions" ]; then
  echo "glibc-floor: $binary has no GLIBC_ symbol versions (not a glibc dynamic binary)" >&2
  exit 1
fi
highest=$(tail -n1 <<<"$versions")
echo "glibc-floor: $binary needs GLIBC_$highest (floor $floor)"
if [ "$(printf '%s\n%s\n' "$floor" "$highest" | sort -V | tail -n1)" != "$floor" ]; then
  above=$(grep -o '[^ ]*@GLIBC_[0-9.]*' <<<"$symbols" | sort -u | while read -r symbol; do
    version=${symbol##*@GLIBC_}
    [ "$(printf '%s\n%s\n' "$floor" "$version" | sort -V | tail -n1)" = "$floor" ] || echo "$symbol"
  done | tr '\n' ' ')
  echo "glibc-floor: above GLIBC_$floor: $above" >&2
  exit 1
fi
