/* The return value of module_sig_check (or mod_verify_sig): one count per errno. Both take two
 * arguments, so the return value is the third fexit argument. */
#include "hpcnode_bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __s32);
	__type(value, __u64);
} signature_checks SEC(".maps");

/* Returns that found signature_checks full (only ever a flood of unexpected errnos). */
PER_CPU_COUNTER(signature_checks_dropped);

static __always_inline void record_return(__s32 ret)
{
	if (count_key(&signature_checks, &ret))
		count_slot0(&signature_checks_dropped);
}

SEC("fexit/module_sig_check")
int sig_check_fexit(__u64 *ctx)
{
	record_return((__s32)ctx[2]);
	return 0;
}

/* x86-64 only: the registers up to the return value one, in the order of x86-64's struct
 * pt_regs, which user space sees too (uapi asm/ptrace.h) and so never changes. A fixed layout,
 * not a CO-RE one: the program needs no kernel BTF and loads where there is none. */
struct pt_regs_x86_64 {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax;
};

SEC("kretprobe/module_sig_check")
int sig_check_kretprobe(struct pt_regs_x86_64 *regs)
{
	record_return((__s32)regs->ax);
	return 0;
}
