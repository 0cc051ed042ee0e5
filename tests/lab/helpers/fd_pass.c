/* Kernel lab helper: a descriptor handed from one process to another over a unix socket
 * (SCM_RIGHTS), as libvirt hands QEMU its vfio files.
 *   fd_pass receive SOCKET   listens on SOCKET, keeps the descriptor it is sent, writes
 *                            SOCKET.received, and sleeps until killed
 *   fd_pass send SOCKET PATH opens PATH, writes SOCKET.opened, waits for SOCKET to be
 *                            listened on, sends it there, keeps its own copy and sleeps until
 *                            killed
 * Exits 1 on any failure, saying what failed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "fd_pass: %s: %s\n", what, strerror(errno));
	return 1;
}

static int unix_socket(const char *path, struct sockaddr_un *addr)
{
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	strncpy(addr->sun_path, path, sizeof(addr->sun_path) - 1);
	return socket(AF_UNIX, SOCK_STREAM, 0);
}

/* Creates PATH + SUFFIX, empty. */
static int mark(const char *path, const char *suffix)
{
	char name[128];

	snprintf(name, sizeof(name), "%s%s", path, suffix);
	return close(open(name, O_WRONLY | O_CREAT, 0644));
}

static int receive(const char *path)
{
	struct sockaddr_un addr;
	char byte, control[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
			     .msg_controllen = sizeof(control)};
	int listener = unix_socket(path, &addr), peer, fd;

	if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof(addr)) || listen(listener, 1))
		return fail("listen");
	peer = accept(listener, NULL, NULL);
	if (peer < 0 || recvmsg(peer, &msg, 0) != 1)
		return fail("recvmsg");
	struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
	if (!cmsg || cmsg->cmsg_type != SCM_RIGHTS)
		return fail("no descriptor received");
	memcpy(&fd, CMSG_DATA(cmsg), sizeof(fd));
	close(peer);
	close(listener);
	if (mark(path, ".received"))
		return fail("ready file");
	for (;;)
		pause();
}

static int send_one(const char *path, const char *file)
{
	struct sockaddr_un addr;
	char byte = 0, control[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
			     .msg_controllen = sizeof(control)};
	int sock = unix_socket(path, &addr), fd = open(file, O_RDWR);

	if (fd < 0)
		return fail(file);
	if (mark(path, ".opened"))
		return fail("ready file");
	while (connect(sock, (struct sockaddr *)&addr, sizeof(addr)))
		if (sock < 0 || (errno != ENOENT && errno != ECONNREFUSED) || usleep(100000))
			return fail("connect");
	struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
	cmsg->cmsg_level = SOL_SOCKET;
	cmsg->cmsg_type = SCM_RIGHTS;
	cmsg->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cmsg), &fd, sizeof(fd));
	if (sendmsg(sock, &msg, 0) != 1)
		return fail("sendmsg");
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "receive"))
		return receive(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "send"))
		return send_one(argv[2], argv[3]);
	fprintf(stderr, "usage: fd_pass receive SOCKET | fd_pass send SOCKET PATH\n");
	return 2;
}
