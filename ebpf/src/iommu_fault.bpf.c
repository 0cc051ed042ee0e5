/* iommu:io_page_fault(struct device *dev, unsigned long iova, int flags), reported by drivers
 * that call report_iommu_fault() (AMD-Vi, ARM SMMU; not Intel VT-d): one count per (device
 * name, write flag). Recent SMMUv2 passes a NULL device, which the classic tracepoint would
 * dereference in dev_name(): only tp_btf and raw_tp, and the pointer checked here. */
#include "device_name.h"

#define IOMMU_FAULT_WRITE 0x1

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct device_event_key);
	__type(value, __u64);
} iommu_faults SEC(".maps");

/* Faults that found iommu_faults full: counted without device or access. */
PER_CPU_COUNTER(iommu_faults_dropped);

static __always_inline void record_fault(__u64 *ctx)
{
	struct device_event_key key = {};

	read_device_name(key.device, (struct device *)ctx[0]);
	key.detail = ctx[2] & IOMMU_FAULT_WRITE;
	if (count_key(&iommu_faults, &key))
		count_slot0(&iommu_faults_dropped);
}

SEC("tp_btf/io_page_fault")
int iommu_fault_btf(__u64 *ctx)
{
	record_fault(ctx);
	return 0;
}

SEC("raw_tp/io_page_fault")
int iommu_fault_raw(__u64 *ctx)
{
	record_fault(ctx);
	return 0;
}
