use super::encode::{error, reply, vf_info};
use super::*;

/// What `mlx5e_get_vf_stats()` fills (the e-switch's vport counters: all eight).
fn mlx5e_counters(base: u64) -> Vec<(VfCounter, u64)> {
    VfCounter::ALL
        .iter()
        .enumerate()
        .map(|(index, &counter)| (counter, base + index as u64))
        .collect()
}

#[test]
fn the_request_asks_for_one_link_with_its_vfs() {
    let bytes = request(7, 42);
    assert_eq!(bytes.len(), 40);
    assert_eq!(u32_at(&bytes, 0), 40);
    assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), RTM_GETLINK);
    assert_eq!(u16::from_ne_bytes([bytes[6], bytes[7]]), NLM_F_REQUEST);
    assert_eq!(u32_at(&bytes, 8), 42);
    assert_eq!(u32_at(&bytes, 20), 7, "ifi_index");
    assert_eq!(&bytes[32..36], &[8, 0, 29, 0], "IFLA_EXT_MASK, 8 bytes");
    assert_eq!(u32_at(&bytes, 36), RTEXT_FILTER_VF);
}

#[test]
fn each_vfs_counters_by_its_number() {
    let vfs = [
        vf_info(0, &mlx5e_counters(100)),
        vf_info(1, &mlx5e_counters(200)),
    ];
    let decoded = decode(&reply(5, 4, "ens1f0np0", Some(&vfs)), 5, 4).unwrap();
    assert_eq!(
        decoded,
        vec![
            VfStats {
                vf: 0,
                counters: mlx5e_counters(100)
            },
            VfStats {
                vf: 1,
                counters: mlx5e_counters(200)
            },
        ]
    );
}

#[test]
fn an_older_kernels_entries_are_read_as_far_as_they_go() {
    let six = &mlx5e_counters(1)[..6];
    let vfs = [vf_info(0, six), vf_info(1, &[])];
    let decoded = decode(&reply(1, 9, "ib0", Some(&vfs)), 1, 9).unwrap();
    assert_eq!(
        decoded,
        vec![VfStats {
            vf: 0,
            counters: six.to_vec()
        }]
    );
}

#[test]
fn a_netdev_without_vf_operations_has_no_vfs() {
    assert_eq!(decode(&reply(1, 2, "dummy0", None), 1, 2), Ok(Vec::new()));
}

#[test]
fn what_is_not_the_reply_asked_for_is_refused() {
    let vfs = [vf_info(0, &mlx5e_counters(0))];
    let good = reply(3, 4, "ens1f0", Some(&vfs));
    assert_eq!(
        decode(&good, 4, 4),
        Err(ReplyError::Sequence { got: 3, sent: 4 })
    );
    assert_eq!(
        decode(&good, 3, 5),
        Err(ReplyError::OtherDevice { got: 4, asked: 5 })
    );
    assert_eq!(decode(&error(3, 19), 3, 4), Err(ReplyError::Kernel(19)));
    assert!(matches!(
        decode(&good[..30], 3, 4),
        Err(ReplyError::MessageLength { .. })
    ));
    let mut other = good.clone();
    other[4] = 20;
    assert_eq!(decode(&other, 3, 4), Err(ReplyError::UnexpectedType(20)));
}

#[test]
fn a_vf_entry_without_its_number_is_refused() {
    let stats = nested_stats();
    let vfs = [crate::netlink::rdma::message::encode::nested(
        IFLA_VF_INFO,
        &[stats],
    )];
    assert_eq!(
        decode(&reply(1, 2, "ens1f0", Some(&vfs)), 1, 2),
        Err(ReplyError::Missing(IFLA_VF_MAC))
    );
}

fn nested_stats() -> Vec<u8> {
    use crate::netlink::rdma::message::encode::{nested, u64};
    nested(IFLA_VF_STATS, &[u64(VfCounter::RxBytes as u16, 1)])
}
