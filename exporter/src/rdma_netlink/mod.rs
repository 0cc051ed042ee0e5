//! The kernel's RDMA netlink interface (`NETLINK_RDMA`), shared by the collectors that ask it:
//! `message.rs` builds requests and decodes replies (plain code over bytes), `socket.rs` makes
//! the only netlink system calls.

pub mod message;
pub mod socket;
