/* Kernel lab helper: a process with many open descriptors, for the cost of reading them.
 *   fd_hoard COUNT READY
 * Raises its descriptor limit to COUNT + 16, duplicates /dev/null onto descriptors 3 to
 * COUNT + 2, writes READY and sleeps until killed. Exits 1 on any failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: fd_hoard COUNT READY\n");
		return 2;
	}
	long count = strtol(argv[1], NULL, 10);
	struct rlimit limit = {.rlim_cur = count + 16, .rlim_max = count + 16};
	int null = open("/dev/null", O_RDONLY);

	if (count <= 0 || null < 0 || setrlimit(RLIMIT_NOFILE, &limit)) {
		fprintf(stderr, "fd_hoard: setup: %s\n", strerror(errno));
		return 1;
	}
	for (long fd = 3; fd < count + 3; fd++) {
		if (fd != null && dup2(null, fd) < 0) {
			fprintf(stderr, "fd_hoard: dup2 %ld: %s\n", fd, strerror(errno));
			return 1;
		}
	}
	if (close(open(argv[2], O_WRONLY | O_CREAT, 0644))) {
		fprintf(stderr, "fd_hoard: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	for (;;)
		pause();
}
