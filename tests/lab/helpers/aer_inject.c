/* Kernel lab helper: injects one PCIe AER error through the aer_inject module, as the
 * aer-inject tool does.
 *   aer_inject ADDRESS correctable|uncorrectable STATUS
 * ADDRESS is a PCI address (0000:01:00.0); STATUS the bits to set in the device's Correctable
 * or Uncorrectable Error Status register (hexadecimal, 0x1 RxErr, 0x4000 CmpltTO). Whether an
 * uncorrectable error is fatal or not is the device's Uncorrectable Error Severity register's
 * to say. The kernel fakes the device's and its root port's AER registers, then runs the root
 * port's AER interrupt (drivers/pci/pcie/aer_inject.c). Exits 0 when the write was accepted. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* struct aer_error_inj of drivers/pci/pcie/aer_inject.c (the kernel's ABI, no header). */
struct aer_error_inj {
	uint8_t bus;
	uint8_t dev;
	uint8_t fn;
	uint32_t uncor_status;
	uint32_t cor_status;
	uint32_t header_log0;
	uint32_t header_log1;
	uint32_t header_log2;
	uint32_t header_log3;
	uint32_t domain;
};

int main(int argc, char **argv)
{
	struct aer_error_inj einj;
	unsigned int domain, bus, dev, fn;
	char *end;
	unsigned long status;
	int fd;

	if (argc != 4 || sscanf(argv[1], "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4 ||
	    bus > 0xff || dev > 0x1f || fn > 7) {
		fprintf(stderr, "usage: aer_inject DDDD:BB:DD.F correctable|uncorrectable STATUS\n");
		return 2;
	}
	errno = 0;
	status = strtoul(argv[3], &end, 16);
	if (errno || *end || status == 0 || status > UINT32_MAX) {
		fprintf(stderr, "aer_inject: bad status %s\n", argv[3]);
		return 2;
	}
	memset(&einj, 0, sizeof(einj));
	einj.domain = domain;
	einj.bus = bus;
	einj.dev = dev;
	einj.fn = fn;
	if (strcmp(argv[2], "correctable") == 0) {
		einj.cor_status = status;
	} else if (strcmp(argv[2], "uncorrectable") == 0) {
		einj.uncor_status = status;
	} else {
		fprintf(stderr, "aer_inject: severity must be correctable or uncorrectable\n");
		return 2;
	}
	fd = open("/dev/aer_inject", O_WRONLY);
	if (fd < 0) {
		fprintf(stderr, "aer_inject: /dev/aer_inject: %s\n", strerror(errno));
		return 1;
	}
	if (write(fd, &einj, sizeof(einj)) != (ssize_t)sizeof(einj)) {
		fprintf(stderr, "aer_inject: write: %s\n", strerror(errno));
		close(fd);
		return 1;
	}
	close(fd);
	return 0;
}
