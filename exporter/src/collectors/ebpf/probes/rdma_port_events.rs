//! `rdma_port_events`: the events ib_core hands its clients (port error, port active, LID, P_Key,
//! SM and GID changes, client reregister, device fatal), by device, port and event: a kprobe on
//! `ib_dispatch_event_clients`, attached while `ib_core` is loaded
//! ([`super::super::late_attach`]). Every port flap counts, however short.

use crate::collectors::ebpf::error::SyscallError;
use crate::collectors::ebpf::hooks::{attempt, Attempt, Hook::*, Needs};
use crate::collectors::ebpf::maps::Maps;
use crate::collectors::ebpf::spec::{c_name, device_label, ProbeSpec, Shared};
use crate::metrics::{Desc, Samples, Value};

pub const SPEC: ProbeSpec = ProbeSpec {
    name: "rdma_port_events",
    object: aya::include_bytes_aligned!("../../../../../ebpf/rdma_port_events.bpf.o"),
    attempts: ATTEMPTS,
    required_by_strict: false,
    target_modules: &["ib_core"],
    needs_modules: false,
    lost_map: "port_events_dropped",
    metrics: &[RDMA_PORT_EVENTS],
    started: None,
    samples,
    follow: None,
};

const ATTEMPTS: &[Attempt] = &[
    attempt(
        Kprobe,
        "rdma_port_event_kprobe",
        &["ib_dispatch_event_clients"],
        Needs::BtfOnX86_64,
    ),
    // Where the former is inlined or absent: the drivers' events, with the same argument, but
    // not the GID changes the core's GID cache dispatches itself.
    attempt(
        Kprobe,
        "rdma_port_event_kprobe",
        &["ib_dispatch_event"],
        Needs::BtfOnX86_64,
    ),
];

const RDMA_PORT_EVENTS: Desc = Desc::counter(
    "hpcnode_rdma_port_events",
    "Events the kernel's RDMA core delivered to its clients (ib_dispatch_event_clients), by device, port and event.",
    None,
);

/// `struct port_event_key` of ebpf/src/rdma_port_events.bpf.c.
#[repr(C)]
#[derive(Clone, Copy)]
struct PortEventKey {
    device: [u8; 48],
    port: u32,
    event: u32,
}
// SAFETY: bytes and two 32-bit integers, no padding (48 + 4 + 4 bytes, 4-byte aligned).
unsafe impl aya::Pod for PortEventKey {}

fn samples(maps: &Maps<'_>, _: &Shared, out: &mut Samples) -> Result<(), SyscallError> {
    let events: Vec<_> = maps
        .keyed_counts::<PortEventKey>("port_events")?
        .into_iter()
        .map(|(key, count)| (c_name(&key.device), key.port, key.event, count))
        .collect();
    push_events(&events, out);
    Ok(())
}

/// (device name, port, event number) -> deliveries; port 0 is a device event (`port=""`).
fn push_events(events: &[(String, u32, u32, u64)], out: &mut Samples) {
    for (device, port, event, count) in events {
        let port = if *port == 0 {
            String::new()
        } else {
            port.to_string()
        };
        out.push(
            &RDMA_PORT_EVENTS,
            vec![
                ("device", device_label(device).into()),
                ("port", port.into()),
                ("event", event_name(*event).into()),
            ],
            Value::Int(*count),
        );
    }
}

/// `enum ib_event_type` of include/rdma/ib_verbs.h (the same on the lab's 5.10, 6.1 and 6.12,
/// read from their BTF), lower case without `IB_EVENT_`; a number it does not have is `other`.
fn event_name(event: u32) -> &'static str {
    const NAMES: [&str; 20] = [
        "cq_err",
        "qp_fatal",
        "qp_req_err",
        "qp_access_err",
        "comm_est",
        "sq_drained",
        "path_mig",
        "path_mig_err",
        "device_fatal",
        "port_active",
        "port_err",
        "lid_change",
        "pkey_change",
        "sm_change",
        "srq_err",
        "srq_limit_reached",
        "qp_last_wqe_reached",
        "client_reregister",
        "gid_change",
        "wq_fatal",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|index| NAMES.get(index))
        .copied()
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::ebpf::spec::tests::exposition;

    #[test]
    fn port_and_device_events_become_labelled_series() {
        let events = [
            ("rxe0".into(), 1, 10, 5),
            ("rxe0".into(), 1, 9, 5),
            ("rxe0".into(), 1, 18, 2),
            ("mlx5_0".into(), 0, 8, 1),
            (String::new(), 2, 99, 1),
        ];
        let mut out = Samples::default();
        push_events(&events, &mut out);
        assert_eq!(
            exposition(out),
            [
                "hpcnode_rdma_port_events_total{device=\"rxe0\",port=\"1\",event=\"port_err\"} 5",
                "hpcnode_rdma_port_events_total{device=\"rxe0\",port=\"1\",event=\"port_active\"} 5",
                "hpcnode_rdma_port_events_total{device=\"rxe0\",port=\"1\",event=\"gid_change\"} 2",
                "hpcnode_rdma_port_events_total{device=\"mlx5_0\",port=\"\",event=\"device_fatal\"} 1",
                "hpcnode_rdma_port_events_total{device=\"unknown\",port=\"2\",event=\"other\"} 1",
            ]
        );
    }

    #[test]
    fn event_names_follow_the_kernels_enum() {
        assert_eq!(event_name(0), "cq_err");
        assert_eq!(event_name(11), "lid_change");
        assert_eq!(event_name(12), "pkey_change");
        assert_eq!(event_name(13), "sm_change");
        assert_eq!(event_name(17), "client_reregister");
        assert_eq!(event_name(19), "wq_fatal");
        assert_eq!(event_name(20), "other");
        assert_eq!(event_name(u32::MAX), "other");
    }
}
