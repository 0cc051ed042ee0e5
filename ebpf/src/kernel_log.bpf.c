/* printk:console: each kernel log line goes to a ring buffer that the exporter drains and
 * matches in user space. No wakeup per line: the exporter polls, so a line costs a copy. */
#include "hpcnode_bpf.h"

/* Longest line prefix forwarded; every line the matcher knows fits well within it. */
#define LINE_MAX 256

struct kernel_log_line {
	__u32 len;
	char text[LINE_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} kernel_log_lines SEC(".maps");

/* Lines dropped because the ring buffer was full. */
PER_CPU_COUNTER(kernel_log_lost);

static __always_inline void forward_line(const char *text, __u64 len)
{
	struct kernel_log_line *line = bpf_ringbuf_reserve(&kernel_log_lines, sizeof(*line), 0);

	if (!line) {
		count_slot0(&kernel_log_lost);
		return;
	}
	if (len > LINE_MAX - 1)
		len = LINE_MAX - 1;
	line->len = len;
	/* Hide the clamp from clang, which would otherwise drop the mask that gives the
	 * verifier its bound on the copy size. */
	asm volatile("" : "+r"(len));
	bpf_probe_read(line->text, len & (LINE_MAX - 1), text);
	/* Wakes the drain thread, which sleeps in poll(2) (the kernel wakes it only when it has
	 * caught up, so a burst costs one wake-up). */
	bpf_ringbuf_submit(line, 0);
}

SEC("tp_btf/console")
int kernel_log_btf(__u64 *ctx)
{
	forward_line((const char *)ctx[0], ctx[1]);
	return 0;
}

SEC("raw_tp/console")
int kernel_log_raw(__u64 *ctx)
{
	forward_line((const char *)ctx[0], ctx[1]);
	return 0;
}

/* The classic tracepoint's record: msg as __data_loc (offset low 16 bits, length high 16,
 * the length counting the terminating NUL). */
struct console_record {
	__u64 common;
	__u32 msg_loc;
};

SEC("tracepoint/printk/console")
int kernel_log_tp(struct console_record *record)
{
	__u32 loc = record->msg_loc;
	__u32 len = loc >> 16;

	forward_line((const char *)record + (loc & 0xffff), len ? len - 1 : 0);
	return 0;
}
