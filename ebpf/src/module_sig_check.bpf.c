/* The return value of module_sig_check (or mod_verify_sig): one count per (errno, module). Both
 * take two arguments, so the return value is the third fexit argument. The module is the name
 * in the image being checked (the kernel's copy, decompressed), for both load syscalls. */
#include "module_name.h"

struct signature_key {
	__s32 ret;
	char module[MODULE_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct signature_key);
	__type(value, __u64);
} signature_checks SEC(".maps");

/* Returns that found signature_checks full (only ever a flood of unexpected errnos or names). */
PER_CPU_COUNTER(signature_checks_dropped);

/* The image under check, from module_sig_check(struct load_info *info, int flags) or
 * mod_verify_sig(const void *mod, struct load_info *info); CO-RE-relocated, so only loaded
 * where the exporter has kernel BTF. */
struct load_info {
	void *hdr;
	unsigned long len;
} __attribute__((preserve_access_index));

static __always_inline void read_info_module_name(char *dst, struct load_info *info)
{
	void *image = 0;
	unsigned long len = 0;

	CORE_READ_INTO(&image, info, hdr);
	CORE_READ_INTO(&len, info, len);
	read_image_module_name(dst, image, len);
}

static __always_inline void record_return(__s32 ret, const char *module)
{
	struct signature_key key = {.ret = ret};

	if (module)
		__builtin_memcpy(key.module, module, sizeof(key.module));
	if (count_key(&signature_checks, &key))
		count_slot0(&signature_checks_dropped);
}

static __always_inline void record_fexit(struct load_info *info, __s32 ret)
{
	struct module_name module = {};

	read_info_module_name(module.name, info);
	record_return(ret, module.name);
}

SEC("fexit/module_sig_check")
int sig_check_fexit(__u64 *ctx)
{
	record_fexit((struct load_info *)ctx[0], (__s32)ctx[2]);
	return 0;
}

SEC("fexit/mod_verify_sig")
int verify_sig_fexit(__u64 *ctx)
{
	record_fexit((struct load_info *)ctx[1], (__s32)ctx[2]);
	return 0;
}

/* x86-64 only: the registers up to the return value one, in the order of x86-64's struct
 * pt_regs, which user space sees too (uapi asm/ptrace.h) and so never changes. A fixed layout,
 * not a CO-RE one: the program needs no kernel BTF and loads where there is none. */
struct pt_regs_x86_64 {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di;
};

/* The module each task's check is about, from the kprobe at the call to the kretprobe at its
 * return (pid_tgid -> name); the kprobe needs kernel BTF, so without it the kretprobe counts
 * with an empty name. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct module_name);
} checking SEC(".maps");

static __always_inline void record_entry(struct load_info *info)
{
	struct module_name module = {};
	__u64 task = bpf_get_current_pid_tgid();

	read_info_module_name(module.name, info);
	bpf_map_update_elem(&checking, &task, &module, BPF_ANY);
}

SEC("kprobe/module_sig_check")
int sig_check_kprobe(struct pt_regs_x86_64 *regs)
{
	record_entry((struct load_info *)regs->di);
	return 0;
}

SEC("kprobe/mod_verify_sig")
int verify_sig_kprobe(struct pt_regs_x86_64 *regs)
{
	record_entry((struct load_info *)regs->si);
	return 0;
}

SEC("kretprobe/module_sig_check")
int sig_check_kretprobe(struct pt_regs_x86_64 *regs)
{
	__u64 task = bpf_get_current_pid_tgid();
	struct module_name *module = bpf_map_lookup_elem(&checking, &task);

	record_return((__s32)regs->ax, module ? module->name : 0);
	if (module)
		bpf_map_delete_elem(&checking, &task);
	return 0;
}
