/* The few BPF definitions the probes use: no vmlinux.h, no libbpf headers, so the objects
 * build with clang alone and CO-RE relocations come from the small structs in each probe. */
#ifndef HPCNODE_BPF_H
#define HPCNODE_BPF_H

typedef unsigned char __u8;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

/* BTF-defined maps (the `.maps` section aya reads). */
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_RB_NO_WAKEUP 1

/* Helper numbers are kernel ABI (include/uapi/linux/bpf.h). bpf_probe_read (4) rather than
 * bpf_probe_read_kernel (113, 5.5+) so the module probes also load on 4.x kernels. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_probe_read)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)4;
static long (*bpf_probe_read_str)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)45;
static void *(*bpf_ringbuf_reserve)(void *ringbuf, __u64 size, __u64 flags) = (void *)131;
static void (*bpf_ringbuf_submit)(void *data, __u64 flags) = (void *)132;

/* Reads a field of a kernel struct through its CO-RE-relocated address. */
#define CORE_READ_INTO(dst, src, field) \
	bpf_probe_read((dst), sizeof(*(dst)), __builtin_preserve_access_index(&(src)->field))

/* Adds one to the u64 counter at `key` of a hash map, creating it when absent; 0 when
 * counted, -1 when the map is full. Module events are rare, so a shared hash with an atomic
 * add is enough (no per-CPU copies to sum). */
static __always_inline int count_key(void *map, const void *key)
{
	__u64 one = 1;
	__u64 *count = bpf_map_lookup_elem(map, key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST) == 0)
		return 0;
	/* Another CPU created it first, or the map is full. */
	count = bpf_map_lookup_elem(map, key);
	if (!count)
		return -1;
	__sync_fetch_and_add(count, 1);
	return 0;
}

/* Adds one to slot 0 of a one-entry per-CPU array (a drop counter). */
static __always_inline void count_slot0(void *map)
{
	__u32 zero = 0;
	__u64 *count = bpf_map_lookup_elem(map, &zero);
	if (count)
		*count += 1;
}

#define PER_CPU_COUNTER(map_name)                       \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); \
		__uint(max_entries, 1);                  \
		__type(key, __u32);                      \
		__type(value, __u64);                    \
	} map_name SEC(".maps")

char LICENSE[] SEC("license") = "GPL";

#endif
