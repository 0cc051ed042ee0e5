/* Kernel lab helper: what a VMM does with a vfio-pci device, up to the classic failure.
 *   vfio_pin GROUP ADDRESS
 * Opens the VFIO container and IOMMU group GROUP (type1 v2), opens device ADDRESS (the kernel
 * enables it: vfio_pci_core_enable), then maps 1 MiB of memory for DMA with RLIMIT_MEMLOCK at
 * 64 KiB and CAP_IPC_LOCK dropped, as an unprivileged VMM would: vfio_pin_pages_remote must
 * refuse with ENOMEM. Exits 0 when it did, 1 on anything else, saying what happened. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/vfio.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAP_SIZE (1 << 20)
#define MEMLOCK_LIMIT (64 << 10)

static int fail(const char *what)
{
	fprintf(stderr, "vfio_pin: %s: %s\n", what, strerror(errno));
	return 1;
}

/* Clears CAP_IPC_LOCK from the effective set: vfio then charges pinned pages to the memlock limit. */
static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &header, data))
		return -1;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &header, data);
}

int main(int argc, char **argv)
{
	char group_path[64];
	struct vfio_group_status status = {.argsz = sizeof(status)};
	struct rlimit memlock = {MEMLOCK_LIMIT, MEMLOCK_LIMIT};
	int container, group, device;
	void *memory;

	if (argc != 3) {
		fprintf(stderr, "usage: vfio_pin GROUP ADDRESS\n");
		return 2;
	}
	container = open("/dev/vfio/vfio", O_RDWR);
	if (container < 0)
		return fail("open /dev/vfio/vfio");
	snprintf(group_path, sizeof(group_path), "/dev/vfio/%s", argv[1]);
	group = open(group_path, O_RDWR);
	if (group < 0)
		return fail(group_path);
	if (ioctl(group, VFIO_GROUP_GET_STATUS, &status))
		return fail("VFIO_GROUP_GET_STATUS");
	if (!(status.flags & VFIO_GROUP_FLAGS_VIABLE)) {
		fprintf(stderr, "vfio_pin: group %s is not viable\n", argv[1]);
		return 1;
	}
	if (ioctl(group, VFIO_GROUP_SET_CONTAINER, &container))
		return fail("VFIO_GROUP_SET_CONTAINER");
	if (ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU))
		return fail("VFIO_SET_IOMMU");
	device = ioctl(group, VFIO_GROUP_GET_DEVICE_FD, argv[2]);
	if (device < 0)
		return fail("VFIO_GROUP_GET_DEVICE_FD");
	printf("vfio_pin: device %s opened\n", argv[2]);

	memory = mmap(NULL, MAP_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (memory == MAP_FAILED)
		return fail("mmap");
	if (setrlimit(RLIMIT_MEMLOCK, &memlock))
		return fail("setrlimit RLIMIT_MEMLOCK");
	if (drop_ipc_lock())
		return fail("dropping CAP_IPC_LOCK");
	struct vfio_iommu_type1_dma_map map = {
		.argsz = sizeof(map),
		.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
		.vaddr = (uintptr_t)memory,
		.iova = 0x100000,
		.size = MAP_SIZE,
	};
	if (ioctl(container, VFIO_IOMMU_MAP_DMA, &map) == 0) {
		fprintf(stderr, "vfio_pin: 1 MiB mapped despite a 64 KiB memlock limit\n");
		return 1;
	}
	if (errno != ENOMEM)
		return fail("VFIO_IOMMU_MAP_DMA failed, but not with ENOMEM");
	printf("vfio_pin: VFIO_IOMMU_MAP_DMA of 1 MiB over a 64 KiB memlock limit: ENOMEM\n");
	return 0;
}
