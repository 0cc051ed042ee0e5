#!/usr/bin/env bash
# Rebuilds the committed probe objects (ebpf/*.bpf.o) from ebpf/src with clang.
#   ebpf/build.sh           rebuild in place
#   ebpf/build.sh --check   rebuild into a temporary directory; fail if a committed object differs
# The flags are fixed and source paths are relative (-fdebug-prefix-map), so the same clang
# gives byte-identical objects on any machine (Debian 12's clang 14: tests/setup.sh).
set -euo pipefail
cd "$(dirname "$0")"
out=.
if [ "${1:-}" = --check ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
for source in src/*.bpf.c; do
  name=$(basename "$source" .c)
  clang -target bpf -O2 -g -D__TARGET_ARCH_x86 -Iinclude \
    -fdebug-prefix-map="$PWD"=. -fno-ident -Wall -Werror \
    -c "$source" -o "$out/$name.o"
done
if [ "$out" != . ]; then
  status=0
  for object in "$out"/*.bpf.o; do
    name=$(basename "$object")
    if ! cmp -s "$object" "$name"; then
      echo "ebpf/$name differs from a rebuild of src/${name%.o}.c: run ebpf/build.sh and commit" >&2
      status=1
    fi
  done
  exit $status
fi
