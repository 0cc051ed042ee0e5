/* vfio-pci failures, from functions of the vfio modules (kprobes: they are module functions,
 * out of reach of fentry/fexit through vmlinux BTF). Each program is its own probe:
 *   vfio_pci_core_enable (vfio_pci_enable before 5.15) returning an errno (int);
 *   vfio_pin_pages_remote returning an errno (long; -ENOMEM past RLIMIT_MEMLOCK);
 *   vfio_pci_core_aer_err_detected(struct pci_dev *, pci_channel_state_t): an AER error on an
 *   assigned device, by device and channel state. */
#include "device_name.h"

/* x86-64 only: argument and return registers. */
struct pt_regs {
	unsigned long di;
	unsigned long si;
	unsigned long ax;
} __attribute__((preserve_access_index));

struct pci_dev {
	struct device dev;
} __attribute__((preserve_access_index));

/* Largest errno the kernel returns (MAX_ERRNO). */
#define MAX_ERRNO 4095

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __s32);
	__type(value, __u64);
} vfio_failures SEC(".maps");

PER_CPU_COUNTER(vfio_failures_dropped);

static __always_inline void record_errno(long ret)
{
	__s32 errno_value = -ret;

	if (ret >= 0 || ret < -MAX_ERRNO)
		return;
	if (count_key(&vfio_failures, &errno_value))
		count_slot0(&vfio_failures_dropped);
}

SEC("kretprobe/vfio_pci_core_enable")
int vfio_enable_kretprobe(struct pt_regs *regs)
{
	/* An int return: the upper half of the register is undefined. */
	record_errno((int)regs->ax);
	return 0;
}

SEC("kretprobe/vfio_pin_pages_remote")
int vfio_pin_kretprobe(struct pt_regs *regs)
{
	record_errno((long)regs->ax);
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct device_event_key);
	__type(value, __u64);
} vfio_aer_errors SEC(".maps");

PER_CPU_COUNTER(vfio_aer_errors_dropped);

SEC("kprobe/vfio_pci_core_aer_err_detected")
int vfio_aer_kprobe(struct pt_regs *regs)
{
	struct device_event_key key = {};
	struct pci_dev *pdev = (struct pci_dev *)regs->di;

	if (pdev)
		read_device_name(key.device, __builtin_preserve_access_index(&pdev->dev));
	key.detail = regs->si;
	if (count_key(&vfio_aer_errors, &key))
		count_slot0(&vfio_aer_errors_dropped);
	return 0;
}
