//! The kernel's RDMA netlink interface (`NETLINK_RDMA`), shared by the collectors that ask it:
//! `message.rs` builds requests and decodes replies (plain code over bytes), `counters.rs`
//! decodes the QP counter replies, both with `reply.rs` (attributes, the values replies share,
//! errors); `socket.rs` makes the only netlink system calls.

pub mod counters;
pub mod message;
pub mod reply;
pub mod socket;
