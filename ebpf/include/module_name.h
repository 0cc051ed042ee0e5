/* Which module a load is about: the name a module image gives itself, and the name of the file
 * behind a finit_module descriptor. Both are only read, through bpf_probe_read, which fails
 * instead of faulting, and every offset taken from the image is checked against its length,
 * so a corrupted or hostile image gives no name rather than a wrong one. */
#ifndef HPCNODE_MODULE_NAME_H
#define HPCNODE_MODULE_NAME_H

#include "hpcnode_bpf.h"

/* What only the module-name readers use, kept out of hpcnode_bpf.h so the other probes'
 * objects (their line info) stay as they are. Helper numbers are kernel ABI. */
typedef unsigned short __u16;
#define BPF_MAP_TYPE_LRU_HASH 9
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static __u64 (*bpf_get_current_task)(void) = (void *)35;

/* MODULE_NAME_LEN is 64 - sizeof(unsigned long) on every 64-bit kernel. */
#define MODULE_NAME_LEN 56

/* A name as the exporter reads it from a map: empty where none was found. */
struct module_name {
	char name[MODULE_NAME_LEN];
};

struct elf64_header {
	__u8 e_ident[16];
	__u16 e_type, e_machine;
	__u32 e_version;
	__u64 e_entry, e_phoff, e_shoff;
	__u32 e_flags;
	__u16 e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx;
};

struct elf64_section {
	__u32 sh_name, sh_type;
	__u64 sh_flags, sh_addr, sh_offset, sh_size;
	__u32 sh_link, sh_info;
	__u64 sh_addralign, sh_entsize;
};

/* `struct module` starts with `enum module_state state` (padded to 8) and `struct list_head
 * list`, then `char name[MODULE_NAME_LEN]`, on every 64-bit kernel since 2.6: a fixed offset
 * into the image's copy of it, which has no BTF of its own. */
#define THIS_MODULE_NAME_OFFSET 24

/* The section holding the module's `struct module` goes last but a few (relocations, symbols,
 * strings, BTF, debug sections), so it is looked for from the end: 8th or 9th from the end in
 * Debian's modules. */
#define SECTIONS_SEARCHED 64

/* ".gnu.linkonce.this_module" and its NUL as little-endian words. */
#define THIS_MODULE_WORD0 0x6e696c2e756e672eULL /* .gnu.lin */
#define THIS_MODULE_WORD1 0x68742e65636e6f6bULL /* konce.th */
#define THIS_MODULE_WORD2 0x6c75646f6d5f7369ULL /* is_modul */
#define THIS_MODULE_TAIL 0x0065                 /* e\0 */

/* Copies the `name` of the image's .gnu.linkonce.this_module section (what the kernel will call
 * the module) into dst, the ELF image of `len` bytes at `image` (kernel or, on x86-64, user
 * memory). Leaves dst as it is when the image is not a 64-bit ELF file or has no such section
 * within its length. Needs bounded loops (5.3+). */
static __always_inline void read_image_module_name(char *dst, const char *image, __u64 len)
{
	struct elf64_header header;
	struct elf64_section section;
	__u64 strings, words[4];
	__u32 i;

	if (len < sizeof(header) || bpf_probe_read(&header, sizeof(header), image))
		return;
	if (header.e_ident[0] != 0x7f || header.e_ident[1] != 'E' || header.e_ident[2] != 'L' ||
	    header.e_ident[3] != 'F' || header.e_ident[4] != 2 /* ELFCLASS64 */ ||
	    header.e_shentsize != sizeof(section) || header.e_shstrndx >= header.e_shnum ||
	    header.e_shoff > len || (__u64)header.e_shnum * sizeof(section) > len - header.e_shoff)
		return;
	if (bpf_probe_read(&section, sizeof(section),
			   image + header.e_shoff + (__u64)header.e_shstrndx * sizeof(section)))
		return;
	strings = section.sh_offset;
	if (strings > len)
		return;
#pragma clang loop unroll(disable)
	for (i = 1; i <= SECTIONS_SEARCHED; i++) {
		if (i > header.e_shnum)
			return;
		if (bpf_probe_read(&section, sizeof(section),
				   image + header.e_shoff + (__u64)(header.e_shnum - i) * sizeof(section)))
			return;
		if (section.sh_name > len - strings || sizeof(words) > len - strings - section.sh_name)
			continue;
		if (bpf_probe_read(words, sizeof(words), image + strings + section.sh_name))
			continue;
		if (words[0] != THIS_MODULE_WORD0 || words[1] != THIS_MODULE_WORD1 ||
		    words[2] != THIS_MODULE_WORD2 || (words[3] & 0xffff) != THIS_MODULE_TAIL)
			continue;
		if (section.sh_offset > len || section.sh_size > len - section.sh_offset ||
		    section.sh_size < THIS_MODULE_NAME_OFFSET + MODULE_NAME_LEN)
			return;
		bpf_probe_read_str(dst, MODULE_NAME_LEN, image + section.sh_offset + THIS_MODULE_NAME_OFFSET);
		return;
	}
}

/* current->files->fdt->fd[fd]->f_path.dentry->d_name.name, through CO-RE-relocated offsets
 * (kernel BTF only: the exporter loads the programs that call this only where it has BTF). */
struct qstr {
	const unsigned char *name;
} __attribute__((preserve_access_index));

struct dentry {
	struct qstr d_name;
} __attribute__((preserve_access_index));

struct path {
	struct dentry *dentry;
} __attribute__((preserve_access_index));

struct file {
	struct path f_path;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct task_struct {
	struct files_struct *files;
} __attribute__((preserve_access_index));

/* The file name (`pcspkr.ko.xz`) of the calling task's descriptor `fd` into dst; dst is left as
 * it is for a descriptor that is not open. */
static __always_inline void read_fd_file_name(char *dst, int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct files_struct *files = 0;
	struct fdtable *fdt = 0;
	struct file **fds = 0;
	struct file *file = 0;
	struct dentry *dentry = 0;
	const unsigned char *name = 0;
	unsigned int max_fds = 0;

	if (fd < 0)
		return;
	CORE_READ_INTO(&files, task, files);
	if (!files)
		return;
	CORE_READ_INTO(&fdt, files, fdt);
	if (!fdt)
		return;
	CORE_READ_INTO(&max_fds, fdt, max_fds);
	CORE_READ_INTO(&fds, fdt, fd);
	if ((unsigned int)fd >= max_fds || !fds)
		return;
	if (bpf_probe_read(&file, sizeof(file), fds + fd) || !file)
		return;
	CORE_READ_INTO(&dentry, file, f_path.dentry);
	if (!dentry)
		return;
	CORE_READ_INTO(&name, dentry, d_name.name);
	if (name)
		bpf_probe_read_str(dst, MODULE_NAME_LEN, name);
}

#endif
