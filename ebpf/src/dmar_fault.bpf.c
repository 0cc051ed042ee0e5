/* dmar_fault(int irq, void *dev_id): the Intel VT-d fault interrupt handler, dev_id its
 * struct intel_iommu. One count per interrupt and IOMMU unit (`dmar<seq_id>`); one interrupt
 * may carry several faults, which the handler then prints, ratelimited. */
#include "hpcnode_bpf.h"

/* __builtin_preserve_field_info kind: whether the running kernel's struct has the field. */
#define BPF_FIELD_EXISTS 2

struct intel_iommu {
	int seq_id;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __s32);
	__type(value, __u64);
} fault_interrupts SEC(".maps");

PER_CPU_COUNTER(fault_interrupts_dropped);

static __always_inline void record_interrupt(struct intel_iommu *iommu)
{
	__s32 seq_id = -1;

	/* Kernels without Intel IOMMU support lack the type: the read is left out there. */
	if (iommu && __builtin_preserve_field_info(iommu->seq_id, BPF_FIELD_EXISTS))
		CORE_READ_INTO(&seq_id, iommu, seq_id);
	if (count_key(&fault_interrupts, &seq_id))
		count_slot0(&fault_interrupts_dropped);
}

SEC("fentry/dmar_fault")
int dmar_fault_fentry(__u64 *ctx)
{
	record_interrupt((struct intel_iommu *)ctx[1]);
	return 0;
}

/* x86-64 only: the second argument register. */
struct pt_regs {
	unsigned long si;
} __attribute__((preserve_access_index));

SEC("kprobe/dmar_fault")
int dmar_fault_kprobe(struct pt_regs *regs)
{
	record_interrupt((struct intel_iommu *)regs->si);
	return 0;
}
