# A real Slurm with CgroupPlugin=cgroup/v2 (issue 41): Debian 12's slurmctld, slurmd and munged
# on a kernel whose only cgroup hierarchy is cgroup2, which the CI machine cannot give them
# (its v1 hierarchies make slurmd stop with "Hybrid mode is not supported"). The guest has no
# Debian userspace of its own, so it borrows the host's: the host's root filesystem, read-only
# over 9p (share=hostroot), under a tmpfs overlay, is the root of a chroot with the guest's
# /proc, /sys, /dev and cgroup2, and tests/slurm/run.sh --attribution-only runs there: every kind of job
# step attributed as squeue names it, as root and as uid 65534 under hidepid=invisible, and
# ib_write_bw over Soft-RoCE in an srun job attributed by the exporter to that job (the
# scheduler glue, which does not depend on the plugin, runs in tests/run.sh's slurm stage on the
# host). PID 1 is not systemd: cgroup.conf says IgnoreSystemd=yes, and run.sh makes
# system.slice with its controllers, as systemd would have. The layout it sees is written to
# target/lab/6.12/share/results/slurm_cgroup_v2/cgroup_v2/ (tests/fixtures/slurm/cgroup_v2/).
# lab: modules=overlay dummy rdma_rxe ib_uverbs rdma_ucm crc32_generic crc32_pclmul
# lab: tools=verbs
# lab: share=hostroot
# lab: boot=slurm
# lab: kernels=6.12
# lab: timeout=600

lab_scenario host_userspace
repo=$(cat /lab/hostroot-repo)
root=/tmp/slurm-root
mkdir -p /host /tmp/overlay "$root"
lab_check "modprobe overlay dummy" modprobe -a overlay dummy
lab_check "host root over 9p, read-only" \
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,ro hostroot /host
mount -t tmpfs tmpfs /tmp/overlay
mkdir /tmp/overlay/upper /tmp/overlay/work
lab_check "tmpfs overlay on it" mount -t overlay overlay \
  -o lowerdir=/host,upperdir=/tmp/overlay/upper,workdir=/tmp/overlay/work "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount -t devtmpfs devtmpfs "$root/dev"
# What udev would add to devtmpfs: bash's process substitution opens /dev/fd/N.
ln -s /proc/self/fd "$root/dev/fd"
for n in 0:stdin 1:stdout 2:stderr; do ln -s "/proc/self/fd/${n%:*}" "$root/dev/${n#*:}"; done
mkdir -p "$root/dev/pts"
mount -t devpts devpts "$root/dev/pts"
mount -t tmpfs tmpfs "$root/run"
mount -t cgroup2 none "$root/sys/fs/cgroup"
# slurm.conf names the node by `hostname -s`; slurmctld finds it by name, with getaddrinfo's
# AI_ADDRCONFIG, which finds no IPv4 name while loopback is the only interface.
hostname labnode
ip link add lab0 type dummy && ip addr add 192.0.2.1/24 dev lab0 && ip link set lab0 up
echo "192.0.2.1 labnode" >> "$root/etc/hosts"
lab_check "labnode resolves in the chroot" chroot "$root" getent ahostsv4 labnode
lab_check "the chroot sees only cgroup2 ($(chroot "$root" cat /proc/self/cgroup))" \
  test "$(chroot "$root" cat /proc/self/cgroup)" = "0::/"
lab_check "the repository at $repo with its build" test -x "$root$repo/target/debug/examples/slurm_job"
# Soft-RoCE, and rdma-core's userspace from the initramfs where the host has none of it.
lab_softroce_up
for file in /usr/lib/x86_64-linux-gnu/lib* /etc/libibverbs.d /usr/bin/ib_write_bw; do
  [ -e "$root$file" ] || [ -L "$root$file" ] || cp -a "$file" "$root$file"
done
# (perftest's --version exits 1 after printing it.)
lab_check "ib_write_bw runs in the chroot" sh -c "chroot $root ib_write_bw --version | grep -q '^Version'"

lab_scenario tests_slurm
mkdir -p "$root/tmp/slurm-logs"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  HPCNODE_SLURM_LOGS=/tmp/slurm-logs HPCNODE_SLURM_TIME_SCALE=4 bash "$repo/tests/slurm/run.sh" --capture /tmp/slurm-logs --attribution-only --rdma rxe0 > "$LAB_TMP/slurm.out" 2>&1
rc=$?
cat "$LAB_TMP/slurm.out"
mkdir -p /lab/results/slurm_cgroup_v2
cp -r "$root/tmp/slurm-logs/." /lab/results/slurm_cgroup_v2/
# Each of its checks is one of this group's.
sed -n 's/^PASS: /PASS tests_slurm: /p; s/^FAIL: /FAIL tests_slurm: /p' "$LAB_TMP/slurm.out" >> "$LAB_RESULT"
grep -q '(cgroup/v2)$' "$LAB_TMP/slurm.out" && lab_pass "ran with cgroup/v2" ||
  lab_fail "ran with cgroup/v2" "$(tail -n 1 "$LAB_TMP/slurm.out")"
lab_expect "tests/slurm/run.sh exit status" "$rc" == 0
