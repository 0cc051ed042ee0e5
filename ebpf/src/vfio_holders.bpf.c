/* Which processes may hold a vfio group's or device's file, so that the exporter proves holds
 * from the descriptors of these processes only instead of every process's. A process comes to
 * hold a vfio file in three ways, each recorded here by its tgid:
 *   it opens a group node or a device cdev: vfio_group_fops_open, vfio_device_fops_cdev_open
 *   (6.6+), kprobes into the vfio module (the program needs no register);
 *   it receives one (SCM_RIGHTS, pidfd_getfd, io_uring's fd install all pass
 *   security_file_receive): a file whose operations belong to the vfio module;
 *   it is forked from a recorded process (sched_process_fork, in the parent).
 * Each entry's value is the time of the process's last such event (CLOCK_MONOTONIC ns): the
 * exporter reads again the descriptors of a process with a newer event than it last saw.
 * Recording is all this side does: the exporter seeds the set with one scan after each attach
 * and forgets the processes that exited. A process the set has no room for is counted in
 * vfio_candidates_dropped, and the exporter goes back to scanning. */
#include "hpcnode_bpf.h"

/* Helper numbers are kernel ABI. */
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;

/* MODULE_NAME_LEN is 64 - sizeof(unsigned long) on every 64-bit kernel. */
#define MODULE_NAME_LEN 56

/* x86-64 only: the first argument's register. */
struct pt_regs {
	unsigned long di;
} __attribute__((preserve_access_index));

struct module {
	char name[MODULE_NAME_LEN];
} __attribute__((preserve_access_index));

struct file_operations {
	struct module *owner;
} __attribute__((preserve_access_index));

struct file {
	const struct file_operations *f_op;
} __attribute__((preserve_access_index));

struct task_struct {
	int tgid;
} __attribute__((preserve_access_index));

/* A VM's QEMU, the libvirtd that opened a device for it, and their children: thousands of
 * entries is far more than a node runs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} vfio_candidates SEC(".maps");

PER_CPU_COUNTER(vfio_candidates_dropped);

static __always_inline void record(__u32 tgid)
{
	__u64 now = bpf_ktime_get_ns();

	if (bpf_map_update_elem(&vfio_candidates, &tgid, &now, BPF_ANY))
		count_slot0(&vfio_candidates_dropped);
}

SEC("kprobe/vfio_group_fops_open")
int vfio_holder_open(void *regs)
{
	record(bpf_get_current_pid_tgid() >> 32);
	return 0;
}

/* The module that owns a file's operations is "vfio" for a group, a device cdev, a device
 * descriptor and the container: a process given any of them is read. */
SEC("kprobe/security_file_receive")
int vfio_holder_receive(struct pt_regs *regs)
{
	struct file *file = (struct file *)regs->di;
	const struct file_operations *ops = 0;
	struct module *owner = 0;
	char name[8] = {};

	/* A failed read leaves the pointer 0. */
	CORE_READ_INTO(&ops, file, f_op);
	if (ops)
		CORE_READ_INTO(&owner, ops, owner);
	if (!owner)
		return 0;
	bpf_probe_read_str(name, sizeof(name), __builtin_preserve_access_index(&owner->name));
	if (name[0] == 'v' && name[1] == 'f' && name[2] == 'i' && name[3] == 'o' && name[4] == 0)
		record(bpf_get_current_pid_tgid() >> 32);
	return 0;
}

/* In the parent: a new process (not a thread of the parent) of a recorded one shares its
 * descriptors until it closes them. */
SEC("raw_tp/sched_process_fork")
int vfio_holder_fork(__u64 *ctx)
{
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	int child_tgid = 0;

	if (!bpf_map_lookup_elem(&vfio_candidates, &parent))
		return 0;
	if (CORE_READ_INTO(&child_tgid, child, tgid) == 0 && (__u32)child_tgid != parent)
		record(child_tgid);
	return 0;
}
