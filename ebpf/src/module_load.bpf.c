/* module:module_load: one count per (module name, taint bits) in a hash the exporter reads. */
#include "module_name.h"

struct module {
	unsigned long taints;
	char name[MODULE_NAME_LEN];
} __attribute__((preserve_access_index));

struct module_load_key {
	char name[MODULE_NAME_LEN];
	__u32 taints;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct module_load_key);
	__type(value, __u64);
} module_loads SEC(".maps");

/* Loads that found module_loads full: counted without name or taints. */
PER_CPU_COUNTER(module_loads_dropped);

static __always_inline void record_load(struct module *mod)
{
	struct module_load_key key = {};
	unsigned long taints = 0;

	CORE_READ_INTO(&taints, mod, taints);
	key.taints = taints;
	bpf_probe_read_str(key.name, sizeof(key.name), __builtin_preserve_access_index(&mod->name));
	if (count_key(&module_loads, &key))
		count_slot0(&module_loads_dropped);
}

SEC("tp_btf/module_load")
int module_load_btf(__u64 *ctx)
{
	record_load((struct module *)ctx[0]);
	return 0;
}

SEC("raw_tp/module_load")
int module_load_raw(__u64 *ctx)
{
	record_load((struct module *)ctx[0]);
	return 0;
}

/* The classic tracepoint's record (format stable since 3.x): taints, then the name. */
struct module_load_record {
	__u64 common;
	__u32 taints;
	__u32 name_loc; /* __data_loc: offset in the low 16 bits, length in the high 16 */
};

SEC("tracepoint/module/module_load")
int module_load_tp(struct module_load_record *record)
{
	struct module_load_key key = {};
	__u32 offset = record->name_loc & 0xffff;

	key.taints = record->taints;
	bpf_probe_read_str(key.name, sizeof(key.name), (char *)record + offset);
	if (count_key(&module_loads, &key))
		count_slot0(&module_loads_dropped);
	return 0;
}
