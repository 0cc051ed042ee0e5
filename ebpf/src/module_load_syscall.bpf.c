/* Failed init_module / finit_module calls: one count per (syscall number, errno). */
#include "hpcnode_bpf.h"

/* x86-64 syscall numbers (the exporter offers the pt_regs hooks on x86-64 only). A 32-bit
 * (ia32) caller's numbers differ and are not told apart by the sys_exit hooks. */
#define NR_INIT_MODULE 175
#define NR_FINIT_MODULE 313

struct load_failure_key {
	__u32 syscall_nr;
	__s32 errno_value;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct load_failure_key);
	__type(value, __u64);
} load_failures SEC(".maps");

PER_CPU_COUNTER(load_failures_dropped);

static __always_inline void record_exit(__u32 nr, long ret)
{
	struct load_failure_key key = {.syscall_nr = nr, .errno_value = -ret};

	if (ret >= 0)
		return;
	if (count_key(&load_failures, &key))
		count_slot0(&load_failures_dropped);
}

/* syscalls:sys_exit_*: runs only for the two module syscalls. */
struct syscall_exit_record {
	__u64 common;
	__s32 syscall_nr;
	__s64 ret;
};

SEC("tracepoint/syscalls/sys_exit_finit_module")
int syscall_exit_tp(struct syscall_exit_record *record)
{
	record_exit(record->syscall_nr, record->ret);
	return 0;
}

/* raw_syscalls:sys_exit(struct pt_regs *regs, long ret): runs for every syscall. */
struct pt_regs {
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

static __always_inline void record_raw_exit(__u64 *ctx)
{
	unsigned long nr = 0;

	CORE_READ_INTO(&nr, (struct pt_regs *)ctx[0], orig_ax);
	if (nr == NR_INIT_MODULE || nr == NR_FINIT_MODULE)
		record_exit(nr, (long)ctx[1]);
}

SEC("tp_btf/sys_exit")
int syscall_exit_btf(__u64 *ctx)
{
	record_raw_exit(ctx);
	return 0;
}

SEC("raw_tp/sys_exit")
int syscall_exit_raw(__u64 *ctx)
{
	record_raw_exit(ctx);
	return 0;
}
