/* RDMA port events as ib_core hands them to its clients: a kprobe on
 * ib_dispatch_event_clients(struct ib_event *), the one function every delivery goes through.
 * On Debian's 5.10, 6.1 and 6.12 (their ib_core.ko disassembled) it is called by the ib_wq work
 * items ib_dispatch_event queues (ib_cache_event_task, ib_generic_event_task) and by the GID
 * cache (_ib_cache_gid_del, __ib_cache_gid_add, ib_cache_gid_del_all_netdev_gids, where
 * dispatch_gid_change_event is inlined): so the core's own GID changes count once. Counted by
 * device name, port (0 for device events) and event number. The structs are CO-RE: every lab
 * kernel's vmlinux BTF has struct ib_event and struct ib_device. */
#include "device_name.h"

/* x86-64 only: the first argument's register. */
struct pt_regs {
	unsigned long di;
} __attribute__((preserve_access_index));

/* `dev` is in an anonymous union with `coredev` (5.3+); CO-RE finds it there. */
struct ib_device {
	struct device dev;
} __attribute__((preserve_access_index));

/* include/rdma/ib_verbs.h: the events whose element is a port. */
enum ib_event_type {
	IB_EVENT_PORT_ACTIVE = 9,
	IB_EVENT_PORT_ERR = 10,
	IB_EVENT_LID_CHANGE = 11,
	IB_EVENT_PKEY_CHANGE = 12,
	IB_EVENT_SM_CHANGE = 13,
	IB_EVENT_CLIENT_REREGISTER = 17,
	IB_EVENT_GID_CHANGE = 18,
};

struct ib_event {
	struct ib_device *device;
	union {
		/* u8 before 5.13 (5.10's BTF), u32 since: read at the size the kernel has. */
		__u32 port_num;
	} element;
	enum ib_event_type event;
} __attribute__((preserve_access_index));

/* clang's __builtin_preserve_field_info kind for a field's size (libbpf's bpf_core_read.h). */
#define BPF_FIELD_BYTE_SIZE 1

struct port_event_key {
	char device[DEVICE_NAME_LEN];
	__u32 port;
	__u32 event;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct port_event_key);
	__type(value, __u64);
} port_events SEC(".maps");

PER_CPU_COUNTER(port_events_dropped);

static __always_inline int is_port_event(__u32 event)
{
	return (event >= IB_EVENT_PORT_ACTIVE && event <= IB_EVENT_SM_CHANGE) ||
	       event == IB_EVENT_CLIENT_REREGISTER || event == IB_EVENT_GID_CHANGE;
}

static __always_inline __u32 read_port(struct ib_event *ev)
{
	__u32 port = 0;

	if (__builtin_preserve_field_info(ev->element.port_num, BPF_FIELD_BYTE_SIZE) == 1)
		bpf_probe_read(&port, 1, __builtin_preserve_access_index(&ev->element.port_num));
	else
		CORE_READ_INTO(&port, ev, element.port_num);
	return port;
}

SEC("kprobe/ib_dispatch_event_clients")
int rdma_port_event_kprobe(struct pt_regs *regs)
{
	struct port_event_key key = {};
	struct ib_event *ev = (struct ib_event *)regs->di;
	struct ib_device *device = 0;

	if (!ev)
		return 0;
	CORE_READ_INTO(&key.event, ev, event);
	CORE_READ_INTO(&device, ev, device);
	if (device)
		read_device_name(key.device, __builtin_preserve_access_index(&device->dev));
	/* Other events leave the element unset (DEVICE_FATAL) or hold a pointer. */
	if (is_port_event(key.event))
		key.port = read_port(ev);
	if (count_key(&port_events, &key))
		count_slot0(&port_events_dropped);
	return 0;
}
