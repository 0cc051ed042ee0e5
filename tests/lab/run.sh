#!/usr/bin/env bash
# The kernel lab: boots real Debian kernels in qemu (TCG), runs the real hpcnode_exporter inside,
# drives the scenario groups of tests/lab/scenarios/ and checks /metrics from inside the guest.
#
#   tests/lab/run.sh [--kernel 6.12|6.1|5.10|all] [--jobs N] [--binary PATH] [--list] [GROUP ...]
#
# GROUP is a file name in scenarios/ without .sh; none means all but those marked when=named. The
# guest writes one result file per group to a shared folder; this script reads only those (never
# qemu's exit code), prints every
# check, and exits non-zero on any failed check, missing result or timeout. Downloads are cached in
# tests/lab/.cache (or $HPCNODE_LAB_CACHE); tests/setup.sh installs the host tools. The boots of
# all kernels run N at a time (--jobs, default one more than the cores), the longest first; their outputs
# print in kernel order at the end.
set -euo pipefail
lab=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$lab/../.." && pwd)
work=${HPCNODE_LAB_WORK:-$repo/target/lab} # results and logs
binary=$repo/target/debug/hpcnode_exporter
all_kernels=(6.12 6.1 5.10)
kernels=("${all_kernels[@]}")
parallel=0
list=0
groups=()
while (($#)); do
  case $1 in
    --kernel) case ${2:-} in all) kernels=("${all_kernels[@]}") ;; 6.12 | 6.1 | 5.10) kernels=("$2") ;; *) echo "lab: --kernel 6.12, 6.1, 5.10 or all" >&2; exit 2 ;; esac; shift 2 ;;
    --jobs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "lab: --jobs takes a positive number" >&2; exit 2; }; parallel=$2; shift 2 ;;
    --binary) binary=$(realpath "$2"); shift 2 ;;
    --list) list=1; shift ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "lab: unknown option $1" >&2; exit 2 ;;
    *) groups+=("$1"); shift ;;
  esac
done
if ((${#groups[@]} == 0)); then
  for file in "$lab"/scenarios/*.sh; do
    grep -qx '# lab: when=named' "$file" || groups+=("$(basename "$file" .sh)")
  done
fi

# A group's needs are "# lab: KEY=VALUE" lines in its file:
#   modules=   modules to load (their dependency closure goes into the initramfs)
#   collectors= collectors the group's checks need; the group fails when the binary lacks one
#   cmdline=   extra kernel parameters; machine=pc (default), q35-iommu (intel-iommu + edu) or
#              q35-pcie (e1000e and edu behind PCIe root ports), q35-pcie-iommu (the same behind an Intel IOMMU)
#   tools=verbs  rdma-core userspace (ibverbs, perftest, rdmacm) and iproute2's rdma
#   tools=setpriv util-linux's setpriv as /usr/local/bin/setpriv (busybox's cannot change uids)
#   tools=ldconfig glibc's ldconfig (static) as /sbin/ldconfig, and an older libibverbs, rdma-core 33's
#              (bullseye's libibverbs.so.1.11.33.2, exporter/tests/support/fetch-rdma-userspace.sh),
#              as /opt/lab-stale/libibverbs.so.1.11.33.2: a stale copy for a group to place
#   variants=  signed modules to provide as /lab/modules/M.{signed,unsigned,badsig,foreign_keyid,foreign_serial}.ko,
#              and compressed under /lab/modules/root/lib/modules/<release> with a modules.dep
#   root_modules= modules whose dependency closure joins the variants in that root, as Debian ships them
#   helpers=   C programs from helpers/, built static on the host (gcc -static) into /lab/bin
#   timeout=   seconds the group may run in the guest (default 120)
#   when=named only when named on the command line (measurements too long for every run)
#   boot=      a name: groups with the same machine, cmdline and boot name share one boot (a long
#              group gets a boot of its own, so that no kernel's boots end long after the others')
#   kernels=   the kernels the group runs on (default all), for a group whose subject is not the kernel
#   share=hostroot the host's / read-only over 9p (tag hostroot), for a Debian userspace the
#              initramfs lacks; /lab/hostroot-repo names this repository's path there
directive() { sed -n "s/^# lab: $2=//p" "$lab/scenarios/$1.sh" | head -n1; }
# on_kernel GROUP KERNEL: whether GROUP runs on KERNEL.
on_kernel() { local only; only=$(directive "$1" kernels); [ -z "$only" ] || [[ " $only " == *" $2 "* ]]; }
# What a group's boot is known by: groups with the same key share one boot.
boot_key() { echo "$(directive "$1" machine)|$(directive "$1" share)|$(directive "$1" cmdline)|$(directive "$1" boot)"; }

# --list: the groups this run would boot, one a line with its boot (machine|cmdline|boot), and no boot.
if ((list)); then
  for group in "${groups[@]}"; do echo "$group $(boot_key "$group")"; done
  exit 0
fi
for tool in qemu-system-x86_64 busybox cpio depmod modprobe xz zstd gzip openssl python3 apt-get dpkg gcc; do
  command -v "$tool" > /dev/null || { echo "lab: $tool missing; run tests/setup.sh as root" >&2; exit 2; }
done
[ -x "$binary" ] || { echo "lab: no exporter binary $binary; run cargo build" >&2; exit 2; }

failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

runnable=()
help_text=$("$binary" --help)
for group in "${groups[@]}"; do
  [ -f "$lab/scenarios/$group.sh" ] || { fail "[lab] $group: no such scenario group (scenarios/$group.sh)"; continue; }
  missing=
  for collector in $(directive "$group" collectors); do
    grep -qE -- "--collector\.$collector( |$)" <<< "$help_text" || missing+=" $collector"
  done
  if [ -n "$missing" ]; then
    fail "[all kernels] $group: needs collector(s)$missing, absent from $binary (merge the branch that adds it, or deselect the group by naming the others)"
    continue
  fi
  runnable+=("$group")
done

# Copies the shared libraries that FILEs load (as ldd resolves them, LIBRARY_PATH searched first)
# into the initramfs tree at the same paths; those found under SKIP are in the tree already.
copy_libraries() {
  local stage=$1 library_path=$2 skip=$3 library
  shift 3
  # ldd fails for the scripts among FILEs; their libraries are none.
  { LD_LIBRARY_PATH=$library_path ldd "$@" 2> /dev/null || true; } | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | sort -u |
    while read -r library; do
      if [ -n "$skip" ] && [[ $library == "$skip"/* ]]; then continue; fi
      mkdir -p "$stage$(dirname "$library")"
      cp -L "$library" "$stage$library"
    done
}

# Builds the initramfs for one kernel: busybox, /init, the dynamic loader and libraries of the
# exporter, the modules' dependency closure (decompressed, with its own modules.dep), and tools.
build_initramfs() {
  local root=$1 kver=$2 image=$3 stage module path tools userspace
  stage=$(dirname "$image")/initramfs
  rm -rf "$stage"
  mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,lib/modules/"$kver"/kernel,etc}
  cp "$(command -v busybox)" "$stage/bin/busybox"
  cp "$lab/guest/init" "$stage/init"
  copy_libraries "$stage" "" "" "$binary" # the exporter itself comes over the share
  local modules="virtio_pci 9pnet_virtio 9p" tools=""
  for group in "${runnable[@]}"; do
    modules+=" $(directive "$group" modules)"
    tools+=" $(directive "$group" tools)"
  done
  for module in $modules; do
    modprobe -d "$root" -S "$kver" --show-depends "$module" | awk '$1 == "insmod" {print $2}' ||
      { echo "lab: no module $module in $kver" >&2; exit 1; }
  done | sort -u | while read -r path; do
    local relative=${path#"$root/lib/modules/$kver/"}
    mkdir -p "$stage/lib/modules/$kver/$(dirname "$relative")"
    case $path in
      *.ko.xz) xz -dc "$path" > "$stage/lib/modules/$kver/${relative%.xz}" ;;
      *) cp "$path" "$stage/lib/modules/$kver/$relative" ;;
    esac
  done
  cp "$root/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$stage/lib/modules/$kver/"
  depmod -b "$stage" "$kver"
  if [[ " $tools " == *" verbs "* ]]; then
    userspace=$("$lab/fetch.sh" userspace)
    cp -a "$userspace/usr" "$userspace/etc" "$stage/"
    cp "$(command -v rdma)" "$(command -v ip)" "$stage/usr/bin/"
    copy_libraries "$stage" "$userspace/usr/lib/x86_64-linux-gnu" "$userspace" "$userspace"/usr/bin/* \
      "$userspace"/usr/lib/x86_64-linux-gnu/libibverbs/*.so "$(command -v rdma)" "$(command -v ip)"
  fi
  if [[ " $tools " == *" ldconfig "* ]]; then
    "$repo/exporter/tests/support/fetch-rdma-userspace.sh" > /dev/null
    mkdir -p "$stage/opt/lab-stale"
    cp "$(command -v ldconfig)" "$stage/sbin/ldconfig"
    cp "$repo"/target/rdma-userspace/bullseye/usr/lib/x86_64-linux-gnu/libibverbs.so.1.11.33.2 "$stage/opt/lab-stale/"
  fi
  if [[ " $tools " == *" setpriv "* ]]; then
    mkdir -p "$stage/usr/local/bin" # busybox's own setpriv (no uid change) is /usr/bin/setpriv
    cp "$(command -v setpriv)" "$stage/usr/local/bin/"
    copy_libraries "$stage" "" "" "$(command -v setpriv)"
  fi
  (cd "$stage" && find . | cpio -o -H newc --quiet) > "$image"
}

# Writes the test variants of each signed MODULE into DIR: M.signed.ko (as Debian ships it,
# decompressed), M.unsigned.ko (signature stripped), M.badsig.ko (signature corrupted),
# M.foreign_keyid.ko and M.foreign_serial.ko (re-signed as sign-file signs, by a key made here,
# named by key identifier and by issuer and serial number). DIR/root is a module root for
# --path.rootfs: each variant as kernel/lab/M_<variant>.ko compressed its own way (xz, zstd,
# gzip, none), the ROOT_MODULES' closures as shipped, and a modules.dep naming them all.
make_variants() {
  local root=$1 kver=$2 dir=$3 root_modules=$4 module path variant modules_dep
  shift 4
  local lab_root=$dir/root/lib/modules/$kver
  mkdir -p "$dir" "$lab_root/kernel/lab"
  modules_dep=$lab_root/modules.dep
  : > "$modules_dep"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Lab foreign module key" \
    -addext subjectKeyIdentifier=hash -keyout "$dir/foreign.key" -out "$dir/foreign.crt" 2> /dev/null
  for module in "$@"; do
    path=$(modprobe -d "$root" -S "$kver" --show-depends "$module" | awk '$1 == "insmod" {p = $2} END {print p}')
    [ -n "$path" ] || { echo "lab: no module $module in $kver for its variants" >&2; exit 1; }
    case $path in *.xz) xz -dc "$path" > "$dir/$module.signed.ko" ;; *) cp "$path" "$dir/$module.signed.ko" ;; esac
    python3 "$lab/modsig.py" strip "$dir/$module.signed.ko" "$dir/$module.unsigned.ko"
    python3 "$lab/modsig.py" corrupt "$dir/$module.signed.ko" "$dir/$module.badsig.ko"
    python3 "$lab/modsig.py" sign-keyid "$dir/$module.signed.ko" "$dir/foreign.key" "$dir/foreign.crt" "$dir/$module.foreign_keyid.ko"
    python3 "$lab/modsig.py" sign "$dir/$module.signed.ko" "$dir/foreign.key" "$dir/foreign.crt" "$dir/$module.foreign_serial.ko"
    for variant in signed:xz unsigned:zst foreign_keyid:gz foreign_serial: badsig:xz; do
      local name=kernel/lab/${module}_${variant%:*}.ko compress=${variant#*:}
      case $compress in
        xz) xz --check=crc32 --lzma2=dict=1MiB -c "$dir/$module.${variant%:*}.ko" > "$lab_root/$name.xz" ;;
        zst) zstd -q -c "$dir/$module.${variant%:*}.ko" > "$lab_root/$name.zst" ;;
        gz) gzip -n -c "$dir/$module.${variant%:*}.ko" > "$lab_root/$name.gz" ;;
        *) cp "$dir/$module.${variant%:*}.ko" "$lab_root/$name" ;;
      esac
      echo "$name${compress:+.$compress}:" >> "$modules_dep"
    done
  done
  for module in $root_modules; do
    modprobe -d "$root" -S "$kver" --show-depends "$module" | awk '$1 == "insmod" {print $2}' |
      while read -r path; do
        local relative=${path#"$root/lib/modules/$kver/"}
        mkdir -p "$lab_root/$(dirname "$relative")"
        cp "$path" "$lab_root/$relative"
        awk -v key="$relative:" 'index($0, key) == 1' "$root/lib/modules/$kver/modules.dep" >> "$modules_dep"
      done
  done
}

# Reports one group's result file; a missing file, a missing END line, a non-zero exit or a
# group without a single check all count as failures.
report_group() {
  local kernel=$1 group=$2 result=$3 serial=$4 status seconds checks=0 line
  if [ ! -s "$result" ]; then
    fail "[$kernel] $group: no result (the guest never ran it; see $serial)"
    return
  fi
  while IFS= read -r line; do
    case $line in
      PASS*) echo "PASS [$kernel] $group/${line#PASS }"; checks=$((checks + 1)) ;;
      FAIL*) fail "[$kernel] $group/${line#FAIL }"; checks=$((checks + 1)) ;;
      INFO*) echo "info [$kernel] $group/${line#INFO }" ;;
    esac
  done < "$result"
  read -r status seconds < <(sed -n 's/^END //p' "$result") || true
  if [ -z "$status" ]; then
    fail "[$kernel] $group: no end marker (the boot timed out or the guest died; see $serial)"
  elif [ "$status" != 0 ]; then
    fail "[$kernel] $group: exited with status $status$([ "$status" = 137 ] && echo ' (killed at its time limit)') (see $(dirname "$result")/$group.log)"
  elif ((checks == 0)); then
    fail "[$kernel] $group: ran no check"
  else
    echo "lab: [$kernel] $group: $checks checks in $seconds s"
  fi
}

# Prepares one kernel: its initramfs, share, helpers and module variants, and writes its unpacked
# root and its boots (one line "limit|machine|cmdline|group:timeout,..." per machine and command
# line) into its folder, for the boots to be scheduled with every other kernel's.
prepare_kernel() {
  local kernel=$1 kernel_start=$SECONDS root kver dir group key
  root=$("$lab/fetch.sh" kernel "$kernel")
  kver=$(ls "$root/lib/modules")
  dir=$work/$kernel
  rm -rf "$dir"
  mkdir -p "$dir/share/bin" "$dir/share/results"
  build_initramfs "$root" "$kver" "$dir/initramfs.cpio"
  ln -f "$binary" "$dir/share/bin/hpcnode_exporter" 2> /dev/null || cp "$binary" "$dir/share/bin/hpcnode_exporter"
  for helper in $(for group in "${runnable[@]}"; do directive "$group" helpers; done | xargs -n1 | sort -u); do
    gcc -static -O2 -Wall -Wextra -Werror -o "$dir/share/bin/$helper" "$lab/helpers/$helper.c"
  done
  cp -r "$lab/guest" "$lab/scenarios" "$dir/share/"
  echo "$repo" > "$dir/share/hostroot-repo"
  # The unit as Debian 12's systemd (252) runs it on a kernel with CAP_BPF: the base unit and the
  # drop-ins its generator gives there, for the capabilities they grant.
  cat "$repo/packaging/hpcnode_exporter.service" $("$repo/packaging/systemd/hpcnode_exporter-generator" \
    --list 252 40 "$repo/packaging/systemd/dropins") >"$dir/share/hpcnode_exporter.service"
  mapfile -t variants < <(for group in "${runnable[@]}"; do directive "$group" variants; done | xargs -r -n1 | sort -u)
  root_modules=$(for group in "${runnable[@]}"; do directive "$group" root_modules; done | xargs -r -n1 | sort -u | xargs)
  make_variants "$root" "$kver" "$dir/share/modules" "$root_modules" "${variants[@]}"
  echo "$root" > "$dir/root"
  # Groups with the same machine, command line and boot name share one boot, limited to 90 s
  # (boot and shutdown under TCG, with room to spare) plus each group's own limit.
  while IFS= read -r key; do
    local limit=90 guest_groups=()
    for group in "${runnable[@]}"; do
      [ "$(boot_key "$group")" = "$key" ] && on_kernel "$group" "$kernel" || continue
      group_timeout=$(directive "$group" timeout)
      guest_groups+=("$group:${group_timeout:=120}")
      limit=$((limit + group_timeout))
    done
    echo "$limit|${key%|*}|$(IFS=,; echo "${guest_groups[*]}")"
  done < <(for group in "${runnable[@]}"; do on_kernel "$group" "$kernel" && boot_key "$group"; done | sort -u) > "$dir/boots"
  echo "lab: $kver ready in $((SECONDS - kernel_start)) s (cache $(dirname "$root"))"
}

# Boots one prepared kernel once for one machine and command line, runs its groups and reports
# them; run in a subshell per boot, so its failures are counted from its output.
run_boot() {
  local kernel=$1 limit=$2 machine=$3 share=$4 cmdline=$5 guest_list=$6 root kver dir group boot_groups=() share_args=()
  dir=$work/$kernel
  root=$(cat "$dir/root")
  kver=$(ls "$root/lib/modules")
  for group in ${guest_list//,/ }; do boot_groups+=("${group%:*}"); done
  # shellcheck disable=SC2054 # commas separate qemu's suboptions
  case ${machine:-pc} in
    pc) machine_args=(-machine pc) ;;
    q35-iommu) machine_args=(-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on -device edu)
      cmdline="intel_iommu=on $cmdline" ;;
    # PCIe endpoints behind root ports: qemu's root ports and e1000e have an AER capability,
    # edu (a conventional PCI device) has none.
    q35-pcie) machine_args=(-machine q35
      -device pcie-root-port,id=rp1,bus=pcie.0,chassis=1,addr=0x4 -device e1000e,bus=rp1,addr=0
      -device pcie-root-port,id=rp2,bus=pcie.0,chassis=2,addr=0x5 -device edu,bus=rp2,addr=0) ;;
    # The same behind an Intel IOMMU (no interrupt remapping), for vfio-pci: Debian's kernels
    # have no vfio no-IOMMU mode (CONFIG_VFIO_NOIOMMU is not set).
    q35-pcie-iommu) machine_args=(-machine q35 -device intel-iommu
      -device pcie-root-port,id=rp1,bus=pcie.0,chassis=1,addr=0x4 -device e1000e,bus=rp1,addr=0
      -device pcie-root-port,id=rp2,bus=pcie.0,chassis=2,addr=0x5 -device edu,bus=rp2,addr=0)
      cmdline="intel_iommu=on $cmdline" ;;
    *) fail "[$kernel] ${boot_groups[*]}: unknown machine $machine"; return ;;
  esac
  case $share in
    '') ;;
    # multidevs=remap: / spans several host file systems, whose inode numbers would collide.
    hostroot) share_args=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap") ;;
    *) fail "[$kernel] ${boot_groups[*]}: unknown share $share"; return ;;
  esac
  names=$(IFS=,; echo "${boot_groups[*]}")
  serial=$dir/share/results/serial-${names//,/-}.log
  # A boot whose guest started no group at all (a kernel that died early: seen once in CI
  # on 6.12 after 7 s, and the timer panics above on a loaded host) is booted once more;
  # the serial log's end is shown, so a real early panic still reads in the output.
  for attempt in 1 2; do
    for group in "${boot_groups[@]}"; do rm -f "$dir/share/results/$group.result"; done
    echo "lab: booting $kver (${machine:-pc}${share:+, share $share}${cmdline:+, $cmdline}) for $names, limit $limit s"
    boot_start=$SECONDS
    # Two cores are shared: nice. The limit bounds the whole boot; qemu's exit status says nothing.
    # no_timer_check: on a loaded host TCG can miss the early timer check's ticks, and the kernel
    # panics on that ("IO-APIC + timer doesn't work!", "timer doesn't work through
    # Interrupt-remapped IO-APIC"; seen with three boots beside other builds).
    # timeout runs qemu in a process group of its own, which Ctrl-C does not reach, and bash
    # would wait for it to the limit: run it in the background and pass an interrupt on.
    timeout --kill-after=5 "$limit" nice -n 10 qemu-system-x86_64 -accel tcg -cpu max -m 1G -smp 2 \
      -nographic -no-reboot -nic none "${machine_args[@]}" \
      -kernel "$root/boot/vmlinuz-$kver" -initrd "$dir/initramfs.cpio" \
      -append "console=ttyS0 quiet panic=-1 no_timer_check lab.groups=$guest_list $cmdline" \
      -virtfs "local,path=$dir/share,mount_tag=lab,security_model=none" "${share_args[@]}" \
      < /dev/null > "$serial" 2> "$dir/share/results/qemu-stderr-${names//,/-}.log" &
    qemu_pid=$!
    trap 'kill -TERM "$qemu_pid" 2> /dev/null; wait "$qemu_pid" || true; echo "lab: interrupted" >&2; exit 130' INT TERM
    wait "$qemu_pid" && qemu_status=0 || qemu_status=$?
    trap - INT TERM
    case $qemu_status in 124 | 137) echo "lab: $kver boot for $names timed out after $limit s; qemu killed" ;; esac
    echo "lab: $kver boot for $names took $((SECONDS - boot_start)) s"
    started=0
    for group in "${boot_groups[@]}"; do [ -e "$dir/share/results/$group.result" ] && started=1; done
    ((started)) && break
    echo "lab: [$kernel] the guest started none of $names; the serial log ends:"
    tail -n 25 "$serial" "$dir/share/results/qemu-stderr-${names//,/-}.log" | tr -d '\r' | sed 's/^/  | /'
    if ((attempt == 1)); then echo "lab: [$kernel] booting once more"; fi
  done
  for group in "${boot_groups[@]}"; do report_group "$kernel" "$group" "$dir/share/results/$group.result" "$serial"; done
}

# Seconds of CPU in the children line of a `times` output ("0m1.5s 0m0.2s" for user and system).
cpu_seconds() { tail -n1 "$1" | tr -d 's' | awk '{ split($1, u, "m"); split($2, s, "m"); printf "%.1f %.1f\n", u[1] * 60 + u[2], s[1] * 60 + s[2] }'; }

lab_start=$SECONDS
if ((${#runnable[@]})); then
  # A boot keeps most of a core busy (the guest runs one group at a time; CI's three-kernel
  # run measured 0.87 of a core per boot, the rest the guests' waits): one more than the cores.
  ((parallel)) || parallel=$(($(nproc) + 1))
  mkdir -p "$work"
  pids=()
  trap 'kill -TERM "${pids[@]}" 2> /dev/null; wait; echo "lab: interrupted" >&2; exit 130' INT TERM
  # Every kernel is prepared first (seconds each), then the boots of all kernels share the
  # workers, the longest limit first, so that three kernels on two cores keep both busy and no
  # long boot starts last. Under set -e a failed step (a download, a build) ends the subshell
  # before its marker.
  for kernel in "${kernels[@]}"; do
    while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
    rm -f "$work/$kernel.prepared"
    { prepare_kernel "$kernel" > "$work/$kernel.out" 2>&1; touch "$work/$kernel.prepared"; } &
    pids+=($!)
  done
  wait
  mapfile -t boots < <(for kernel in "${kernels[@]}"; do
    [ -f "$work/$kernel.prepared" ] || continue
    awk -v kernel="$kernel" '{ printf "%s|%s|%02d\n", $0, kernel, NR }' "$work/$kernel/boots"
  done | sort -t'|' -k1,1nr)
  for boot in "${boots[@]}"; do
    IFS='|' read -r limit machine share cmdline guest_list kernel number <<< "$boot"
    while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
    out=$work/$kernel/boot-$number
    # times runs in the boot's own subshell: its children line is that boot's qemu and tools.
    { run_boot "$kernel" "$limit" "$machine" "$share" "$cmdline" "$guest_list" > "$out.out" 2>&1; times > "$out.times"; } &
    pids+=($!)
  done
  wait
  trap - INT TERM
  for kernel in "${kernels[@]}"; do
    cat "$work/$kernel.out"
    if [ ! -f "$work/$kernel.prepared" ]; then
      fail "[$kernel] the lab stopped before booting it (see above)"
      continue
    fi
    for out in "$work/$kernel"/boot-*.out; do
      cat "$out"
      failures=$((failures + $(grep -c '^FAIL' "$out" || true)))
      [ -f "${out%.out}.times" ] || fail "[$kernel] a boot stopped before its report (see above)"
    done
    # Wall time of its boots added up (they may have run beside other kernels' boots), and the
    # CPU time of their processes (qemu above all): how much of it TCG spent computing.
    wall=$(sed -n 's/^lab: .* took \([0-9]*\) s$/\1/p' "$work/$kernel"/boot-*.out | awk '{ s += $1 } END { print s + 0 }')
    cpu=$(for times in "$work/$kernel"/boot-*.times; do cpu_seconds "$times"; done |
      awk '{ u += $1; s += $2 } END { printf "%.0f s user, %.0f s system", u, s }')
    echo "lab: kernel $kernel: boots $wall s of wall time in all, CPU $cpu"
  done
fi
echo "lab: ${kernels[*]} in $((SECONDS - lab_start)) s ($parallel at a time; load average $(cut -d' ' -f1-3 /proc/loadavg))"

if ((failures)); then
  echo "lab: $failures failure(s); logs under $work"
  exit 1
fi
echo "lab: all checks passed"
