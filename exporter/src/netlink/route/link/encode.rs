//! Test only: `RTM_NEWLINK` replies built byte by byte as `rtnl_fill_ifinfo()` and
//! `rtnl_fill_vfinfo()` write them (`net/core/rtnetlink.c`), with the attribute helpers of the
//! RDMA netlink tests.

use super::*;
use crate::netlink::rdma::message::encode::{
    attribute, message, nested, u32 as u32_attribute, u64,
};

/// `IFLA_IFNAME` and `IFLA_NUM_VF`, which the kernel writes before the VF list.
const IFLA_IFNAME: u16 = 3;
const IFLA_NUM_VF: u16 = 21;
/// `IFLA_VF_VLAN` and `IFLA_VF_TRUST`, two of the entries around the counters.
const IFLA_VF_VLAN: u16 = 2;
const IFLA_VF_TRUST: u16 = 9;

/// One VF's `IFLA_VF_INFO`: its `struct ifla_vf_mac`, a VLAN entry, then `counters` in
/// `IFLA_VF_STATS` (none: the nest left out, as an older kernel does).
pub fn vf_info(vf: u32, counters: &[(VfCounter, u64)]) -> Vec<u8> {
    let mut mac = vf.to_ne_bytes().to_vec();
    mac.extend_from_slice(&[0x02, 0, 0, 0, 0, vf as u8]);
    mac.resize(36, 0);
    let mut entries = vec![
        attribute(IFLA_VF_MAC, &mac),
        attribute(IFLA_VF_VLAN, &[vf.to_ne_bytes(), [0; 4], [0; 4]].concat()),
    ];
    if !counters.is_empty() {
        let stats = counters
            .iter()
            .map(|&(counter, value)| u64(counter as u16, value));
        entries.push(nested(IFLA_VF_STATS, &stats.collect::<Vec<_>>()));
    }
    entries.push(attribute(
        IFLA_VF_TRUST,
        &[vf.to_ne_bytes(), [0; 4]].concat(),
    ));
    nested(IFLA_VF_INFO, &entries)
}

/// The reply for `ifindex` (named `name`) with these VF entries (`None`: a netdev without
/// `ndo_get_vf_config`, no `IFLA_VFINFO_LIST`).
pub fn reply(sequence: u32, ifindex: u32, name: &str, vfs: Option<&[Vec<u8>]>) -> Vec<u8> {
    // ifinfomsg: AF_UNSPEC, ARPHRD_ETHER (1), the index, IFF_UP | IFF_BROADCAST, change 0.
    let mut payload = vec![0, 0];
    payload.extend_from_slice(&1u16.to_ne_bytes());
    payload.extend_from_slice(&ifindex.to_ne_bytes());
    payload.extend_from_slice(&0x3u32.to_ne_bytes());
    payload.extend_from_slice(&0u32.to_ne_bytes());
    payload.extend(attribute(IFLA_IFNAME, &[name.as_bytes(), b"\0"].concat()));
    if let Some(vfs) = vfs {
        payload.extend(u32_attribute(IFLA_NUM_VF, vfs.len() as u32));
        payload.extend(nested(IFLA_VFINFO_LIST, vfs));
    }
    message(RTM_NEWLINK, 0, sequence, &payload)
}

/// `NLMSG_ERROR` with a negative errno.
pub fn error(sequence: u32, errno: i32) -> Vec<u8> {
    let payload = [(-errno).to_ne_bytes().to_vec(), request(0, sequence)].concat();
    message(NLMSG_ERROR, 0, sequence, &payload)
}
