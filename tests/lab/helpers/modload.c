/* modload init|finit FILE: loads the module FILE with exactly one system call, init_module with
 * the file's bytes or finit_module with a descriptor of it, and no fallback (busybox insmod
 * tries finit_module, then init_module). Exit 0 when the module loaded, else 1 with the errno's
 * text on stderr, as insmod prints it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int load_image(int fd, const char *path)
{
	struct stat st;
	char *image;
	ssize_t got;
	off_t done = 0;

	if (fstat(fd, &st) != 0 || !(image = malloc(st.st_size ? st.st_size : 1))) {
		perror(path);
		return -1;
	}
	while (done < st.st_size && (got = read(fd, image + done, st.st_size - done)) > 0)
		done += got;
	if (done != st.st_size) {
		fprintf(stderr, "%s: short read\n", path);
		return -1;
	}
	return syscall(SYS_init_module, image, (unsigned long)st.st_size, "");
}

int main(int argc, char **argv)
{
	int fd, rc;

	if (argc != 3 || (strcmp(argv[1], "init") != 0 && strcmp(argv[1], "finit") != 0)) {
		fprintf(stderr, "usage: %s init|finit FILE\n", argv[0]);
		return 2;
	}
	fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(argv[2]);
		return 1;
	}
	if (strcmp(argv[1], "init") == 0)
		rc = load_image(fd, argv[2]);
	else
		rc = syscall(SYS_finit_module, fd, "", 0);
	if (rc != 0) {
		fprintf(stderr, "%s %s: %s\n", argv[1], argv[2], strerror(errno));
		return 1;
	}
	return 0;
}
