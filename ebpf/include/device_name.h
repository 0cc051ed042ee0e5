/* dev_name() in BPF: a struct device's init_name, else its kobject's name, read through
 * CO-RE-relocated offsets. */
#ifndef HPCNODE_DEVICE_NAME_H
#define HPCNODE_DEVICE_NAME_H

#include "hpcnode_bpf.h"

/* Longer than any PCI address (`0000:00:03.0`) or platform device name seen on SMMU systems. */
#define DEVICE_NAME_LEN 48

struct kobject {
	const char *name;
} __attribute__((preserve_access_index));

struct device {
	struct kobject kobj;
	const char *init_name;
} __attribute__((preserve_access_index));

/* Leaves dst as it is (zeroed by the caller) for a NULL device. */
static __always_inline void read_device_name(char *dst, struct device *dev)
{
	const char *name = 0;

	if (!dev)
		return;
	CORE_READ_INTO(&name, dev, init_name);
	if (!name)
		CORE_READ_INTO(&name, dev, kobj.name);
	if (name)
		bpf_probe_read_str(dst, DEVICE_NAME_LEN, name);
}

/* A count per device and one small detail of the event (an access type, a channel state). */
struct device_event_key {
	char device[DEVICE_NAME_LEN];
	__u32 detail;
};

#endif
