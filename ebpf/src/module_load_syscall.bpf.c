/* Failed init_module / finit_module calls: one count per (syscall number, errno, module). The
 * module is named at the syscall's entry and kept per task until its exit: for finit_module the
 * name of the file behind the descriptor, for init_module the name in the image. The entry
 * programs read kernel structs through CO-RE, so the exporter attaches them only where it has
 * kernel BTF; without them every failure is counted with an empty name. */
#include "module_name.h"

/* x86-64 syscall numbers (the exporter offers the pt_regs hooks on x86-64 only). A 32-bit
 * (ia32) caller's numbers differ and are not told apart by the sys_exit hooks. */
#define NR_INIT_MODULE 175
#define NR_FINIT_MODULE 313

struct load_failure_key {
	__u32 syscall_nr;
	__s32 errno_value;
	char module[MODULE_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct load_failure_key);
	__type(value, __u64);
} load_failures SEC(".maps");

PER_CPU_COUNTER(load_failures_dropped);

/* The module each task is loading, from the syscall's entry to its exit (pid_tgid -> name). LRU:
 * an entry whose exit was never seen (the probe attached mid-call) is evicted, not kept. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct module_name);
} loading SEC(".maps");

/* arg0 and arg1 of the call: (fd, uargs) for finit_module, (image, len) for init_module. */
static __always_inline void record_entry(__u32 nr, __u64 arg0, __u64 arg1)
{
	struct module_name module = {};
	__u64 task = bpf_get_current_pid_tgid();

	if (nr == NR_FINIT_MODULE)
		read_fd_file_name(module.name, (int)arg0);
	else
		read_image_module_name(module.name, (const char *)arg0, arg1);
	bpf_map_update_elem(&loading, &task, &module, BPF_ANY);
}

static __always_inline void record_exit(__u32 nr, long ret)
{
	struct load_failure_key key = {.syscall_nr = nr, .errno_value = -ret};
	__u64 task = bpf_get_current_pid_tgid();
	struct module_name *module = bpf_map_lookup_elem(&loading, &task);

	if (module) {
		__builtin_memcpy(key.module, module->name, sizeof(key.module));
		bpf_map_delete_elem(&loading, &task);
	}
	if (ret >= 0)
		return;
	if (count_key(&load_failures, &key))
		count_slot0(&load_failures_dropped);
}

/* syscalls:sys_enter_* and sys_exit_*: run only for the two module syscalls. */
struct syscall_enter_record {
	__u64 common;
	__s32 syscall_nr;
	__u64 args[6];
};

struct syscall_exit_record {
	__u64 common;
	__s32 syscall_nr;
	__s64 ret;
};

SEC("tracepoint/syscalls/sys_enter_finit_module")
int syscall_enter_tp(struct syscall_enter_record *record)
{
	record_entry(record->syscall_nr, record->args[0], record->args[1]);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_finit_module")
int syscall_exit_tp(struct syscall_exit_record *record)
{
	record_exit(record->syscall_nr, record->ret);
	return 0;
}

/* raw_syscalls:sys_enter(struct pt_regs *regs, long id) and sys_exit(struct pt_regs *regs, long
 * ret): run for every syscall. */
struct pt_regs {
	unsigned long di;
	unsigned long si;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

static __always_inline void record_raw_entry(__u64 *ctx)
{
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	unsigned long arg0 = 0, arg1 = 0;

	if (ctx[1] != NR_INIT_MODULE && ctx[1] != NR_FINIT_MODULE)
		return;
	CORE_READ_INTO(&arg0, regs, di);
	CORE_READ_INTO(&arg1, regs, si);
	record_entry(ctx[1], arg0, arg1);
}

static __always_inline void record_raw_exit(__u64 *ctx)
{
	unsigned long nr = 0;

	CORE_READ_INTO(&nr, (struct pt_regs *)ctx[0], orig_ax);
	if (nr == NR_INIT_MODULE || nr == NR_FINIT_MODULE)
		record_exit(nr, (long)ctx[1]);
}

SEC("tp_btf/sys_enter")
int syscall_enter_btf(__u64 *ctx)
{
	record_raw_entry(ctx);
	return 0;
}

SEC("tp_btf/sys_exit")
int syscall_exit_btf(__u64 *ctx)
{
	record_raw_exit(ctx);
	return 0;
}

SEC("raw_tp/sys_enter")
int syscall_enter_raw(__u64 *ctx)
{
	record_raw_entry(ctx);
	return 0;
}

SEC("raw_tp/sys_exit")
int syscall_exit_raw(__u64 *ctx)
{
	record_raw_exit(ctx);
	return 0;
}
