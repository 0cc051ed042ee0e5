/* Kernel lab helper: captures the kernel's RDMA netlink replies byte for byte, for the
 * rdma_netlink collector's decoder tests (exporter/src/netlink/rdma/message.rs reads
 * the files back). Sends one request, as iproute2's rdma sends it, and writes every
 * datagram of the reply, up to and including NLMSG_DONE (a dump; a port's request is answered
 * with one message), to FILE, each prefixed with its length as a native u32.
 *   rdma_nl_capture COMMAND [DEVICE_INDEX [PORT]] FILE
 * COMMAND is an RDMA_NLDEV_CMD_* number (1 GET, 10 RES_QP_GET, 11 RES_CM_ID_GET, 12 RES_CQ_GET,
 * 13 RES_MR_GET, 14 RES_PD_GET, 17 STAT_GET); DEVICE_INDEX is needed by the resource dumps;
 * with PORT the request is no dump but one port's, as the rdma collector asks STAT_GET. The
 * sequence number is 1. Exits 0 once NLMSG_DONE or a port's reply arrived. */
#include <linux/netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NETLINK_RDMA_PROTOCOL 20
#define RDMA_NL_NLDEV 5
#define RDMA_NLDEV_ATTR_DEV_INDEX 1
#define RDMA_NLDEV_ATTR_PORT_INDEX 3

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5) {
		fprintf(stderr, "usage: %s COMMAND [DEVICE_INDEX [PORT]] FILE\n", argv[0]);
		return 2;
	}
	struct {
		struct nlmsghdr header;
		struct nlattr attribute;
		uint32_t index;
		struct nlattr port_attribute;
		uint32_t port;
	} request;
	memset(&request, 0, sizeof(request));
	request.header.nlmsg_len = NLMSG_HDRLEN;
	request.header.nlmsg_type = (RDMA_NL_NLDEV << 10) + atoi(argv[1]);
	request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	request.header.nlmsg_seq = 1;
	if (argc >= 4) {
		request.attribute.nla_len = NLA_HDRLEN + sizeof(uint32_t);
		request.attribute.nla_type = RDMA_NLDEV_ATTR_DEV_INDEX;
		request.index = (uint32_t)atoi(argv[2]);
		request.header.nlmsg_len += NLA_HDRLEN + sizeof(uint32_t);
	}
	if (argc == 5) {
		request.port_attribute.nla_len = NLA_HDRLEN + sizeof(uint32_t);
		request.port_attribute.nla_type = RDMA_NLDEV_ATTR_PORT_INDEX;
		request.port = (uint32_t)atoi(argv[3]);
		request.header.nlmsg_len += NLA_HDRLEN + sizeof(uint32_t);
		request.header.nlmsg_flags = NLM_F_REQUEST;
	}
	FILE *out = fopen(argv[argc - 1], "wb");
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA_PROTOCOL);
	if (!out || fd < 0) {
		perror("rdma_nl_capture: open");
		return 1;
	}
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	if (sendto(fd, &request, request.header.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		perror("rdma_nl_capture: send");
		return 1;
	}
	static unsigned char buffer[65536];
	for (;;) {
		ssize_t received = recv(fd, buffer, sizeof(buffer), 0);
		if (received < 0) {
			perror("rdma_nl_capture: receive");
			return 1;
		}
		uint32_t length = (uint32_t)received;
		fwrite(&length, sizeof(length), 1, out);
		fwrite(buffer, 1, (size_t)received, out);
		/* Stop at NLMSG_DONE, an error, or a port's one reply, found by walking the datagram's
		 * messages. */
		for (struct nlmsghdr *message = (struct nlmsghdr *)buffer; NLMSG_OK(message, (size_t)received);
		     message = NLMSG_NEXT(message, received)) {
			if (message->nlmsg_type == NLMSG_DONE || message->nlmsg_type == NLMSG_ERROR || argc == 5) {
				fclose(out);
				return message->nlmsg_type == NLMSG_ERROR ? 1 : 0;
			}
		}
	}
}
