#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), one after another, from the committed
# seeds (seeds/<target>) and what earlier runs found (corpus/<target>), then prints one line per
# target: executions per second, coverage, corpus size and whether it crashed. Needs a nightly
# toolchain and cargo-fuzz (README.md). Exits 1 when a target crashed or failed an assertion;
# the input is then in artifacts/<target>/.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

# Built once, then each binary run directly (`cargo fuzz run` would check the build per target).
cargo +nightly fuzz build
bin_dir=target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release
# The targets that read files write them under TMPDIR, one directory per process: on tmpfs
# where there is one (on a disk, rewriting the files costs a hundred times the parse).
scratch=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p logs
failed=0
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target" "artifacts/$target"
  log="logs/$target.log"
  # An input that makes a target grow past -rss_limit_mb, or ask for more than
  # -malloc_limit_mb at once, fails the run like a crash. module_file's decoders keep at most a
  # 64 MiB window whatever the image (a bomb held whole took 1.24 GB); ASan's quarantine of
  # freed memory (256 MiB) is most of the rest.
  memory=(-rss_limit_mb=2048)
  if [ "$target" = module_file ]; then
    memory=(-rss_limit_mb=1024 -malloc_limit_mb=160)
  fi
  if TMPDIR=$scratch "$bin_dir/$target" -artifact_prefix="artifacts/$target/" \
      -max_total_time="$seconds" -timeout=10 -print_final_stats=1 "${memory[@]}" \
      "corpus/$target" "seeds/$target" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see fuzz/$log)"
    failed=1
  fi
  # libFuzzer's last status line ("#N DONE cov: C ft: F corp: U/S ...") and final stats.
  status=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$status")
  corpus=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$status")
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log")
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log")
  printf '%-18s %10s execs %8s/s  cov %6s  corpus %-12s %s\n' \
    "$target" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${corpus:-?}" "$result"
done
exit "$failed"
