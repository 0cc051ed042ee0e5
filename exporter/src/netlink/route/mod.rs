//! The kernel's routing netlink (`NETLINK_ROUTE`), as far as the exporter asks it: a PF
//! netdev's per-VF statistics. `link.rs` builds the `RTM_GETLINK` request and decodes its reply
//! (plain code over bytes, with the attribute reader of `netlink/rdma/reply.rs`); `socket.rs`
//! makes the only `NETLINK_ROUTE` system calls.

pub mod link;
pub mod socket;
