#!/usr/bin/env bash
# docs/ebpf.md's probe x hook x kernel table, from the `info` lines of a lab run's output that
# guest/hooks.sh writes (probe_hooks, probe_hooks_iommu, probe_no_btf):
#   tests/lab/run.sh probe_hooks probe_hooks_iommu probe_no_btf | tests/lab/hook_table.sh
# A cell is "EVENTS ev, NS ns/run" (ns per run of the BPF program, from BPF run-time
# statistics; "no BPF" for perf and kmsg) or "no: REASON" for a hook the kernel refused.
set -euo pipefail
awk '
  /^info \[[^]]+\] probe_(hooks|hooks_iommu|no_btf)\/[a-z_]+_[0-9]+: hook / {
    kernel = $2; gsub(/[][]/, "", kernel)
    split($3, where, "/"); scenario = where[2]; sub(/_[0-9]+:$/, "", scenario)
    setting = scenario == "no_btf" ? "no kernel BTF" : scenario == "btf_path" ? "--collector.ebpf.btf-path" : "kernel BTF"
    row = $5 " | " $6 " | " setting
    if ($7 == "attached") {
      cell = $8 " ev, " ($10 == "no" ? "no BPF" : $12 " ns/run (" $10 " runs)")
    } else {
      reason = $0; sub(/.* missed: /, "", reason); sub(/;.*/, "", reason)
      cell = "no: " reason
    }
    if (!(row in seen)) { seen[row] = 1; rows[++nrows] = row }
    if (!(kernel in kernels)) { kernels[kernel] = 1; order[++nkernels] = kernel }
    cells[row, kernel] = cell
  }
  END {
    header = "| probe | hook | BTF |"; rule = "|---|---|---|"
    for (k = 1; k <= nkernels; k++) { header = header " " order[k] " |"; rule = rule "---|" }
    print header; print rule
    for (r = 1; r <= nrows; r++) {
      line = "| " rows[r] " |"
      for (k = 1; k <= nkernels; k++) line = line " " ((rows[r], order[k]) in cells ? cells[rows[r], order[k]] : "") " |"
      print line
    }
  }'
