//! Test only: netlink messages built byte by byte as the kernel writes them (attributes, nests,
//! a whole `RDMA_NLDEV_CMD_GET` reply), for the decoders' tests and property tests.

use super::*;
use crate::netlink::rdma::reply::NLA_HEADER_LEN;

/// An attribute: header, payload, padding to 4 bytes.
pub fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&((NLA_HEADER_LEN + payload.len()) as u16).to_ne_bytes());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(aligned(bytes.len()), 0);
    bytes
}

pub fn u8(kind: u16, value: u8) -> Vec<u8> {
    attribute(kind, &[value])
}

pub fn u32(kind: u16, value: u32) -> Vec<u8> {
    attribute(kind, &value.to_ne_bytes())
}

pub fn u64(kind: u16, value: u64) -> Vec<u8> {
    attribute(kind, &value.to_ne_bytes())
}

pub fn string(kind: u16, value: &str) -> Vec<u8> {
    attribute(kind, &[value.as_bytes(), b"\0"].concat())
}

/// A nest, flagged `NLA_F_NESTED` as `nla_nest_start` flags it since 5.2.
pub fn nested(kind: u16, attributes: &[Vec<u8>]) -> Vec<u8> {
    attribute(kind | 0x8000, &attributes.concat())
}

pub fn message(kind: u16, flags: u16, sequence: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&((NLMSG_HEADER_LEN + payload.len()) as u32).to_ne_bytes());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(&flags.to_ne_bytes());
    bytes.extend_from_slice(&sequence.to_ne_bytes());
    bytes.extend_from_slice(&4242u32.to_ne_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(aligned(bytes.len()), 0);
    bytes
}

/// `NLMSG_DONE` with the dump's result.
pub fn done(sequence: u32, error: i32) -> Vec<u8> {
    message(NLMSG_DONE, 0x2, sequence, &error.to_ne_bytes())
}

/// `NLMSG_ERROR` with a negative errno (and the request's header, as the kernel echoes it).
pub fn error(sequence: u32, errno: i32) -> Vec<u8> {
    let request = request(Command::Devices, None, sequence);
    message(
        NLMSG_ERROR,
        0,
        sequence,
        &[&(-errno).to_ne_bytes()[..], &request].concat(),
    )
}

/// One entry's attributes as `fill_res_{qp,cq,mr,pd,cm_id}_entry` puts those read here.
pub fn entry(resource: Resource, entry: &Entry) -> Vec<u8> {
    let mut attributes = Vec::new();
    if let Some(port) = entry.port {
        attributes.push(u32(attr::PORT_INDEX, port));
    }
    if let Some(number) = entry.qp_number {
        attributes.push(u32(attr::RES_LQPN, number));
    }
    if let Some(qp_type) = entry.qp_type {
        attributes.push(u8(attr::RES_TYPE, qp_type));
    }
    if let Some(state) = entry.qp_state {
        attributes.push(u8(attr::RES_STATE, state));
    }
    if let Some(length) = entry.mr_length {
        attributes.push(u64(attr::RES_MRLEN, length));
    }
    match &entry.holder {
        Holder::Process(pid) => attributes.push(u32(attr::RES_PID, *pid)),
        Holder::Kernel(name) => attributes.push(string(attr::RES_KERN_NAME, name)),
        Holder::Unknown => {}
    }
    // Attributes the collector does not read: skipped, whatever their size.
    attributes.push(u32(33, 0x0a00_0001)); // RDMA_NLDEV_ATTR_RES_SRC_ADDR, cut short
    attributes.push(u64(200, 7)); // an attribute of a later kernel
    nested(resource.table().1, &attributes)
}

/// One dump reply message: device index and name, then the table of `entries`.
pub fn resources(resource: Resource, device: &Device, sequence: u32, entries: &[Entry]) -> Vec<u8> {
    let entries: Vec<Vec<u8>> = entries.iter().map(|item| entry(resource, item)).collect();
    let payload = [
        u32(attr::DEV_INDEX, device.index),
        string(attr::DEV_NAME, &device.name),
        nested(resource.table().0, &entries),
    ]
    .concat();
    message(
        Command::Resources(resource).message_type(),
        0x2,
        sequence,
        &payload,
    )
}

/// The reply to `RDMA_NLDEV_CMD_STAT_GET` on a port, as `stat_get_doit_default_counter`
/// fills it: `fill_nldev_handle`, the port index, then the counters.
pub fn port_counters(device: &Device, port: u32, sequence: u32, counters: &[Counter]) -> Vec<u8> {
    let payload = [
        u32(attr::DEV_INDEX, device.index),
        string(attr::DEV_NAME, &device.name),
        u32(attr::PORT_INDEX, port),
        hw_counters(counters),
    ]
    .concat();
    let command = Command::PortCounters { port };
    message(command.message_type(), 0, sequence, &payload)
}

/// The `STAT_HWCOUNTERS` table as `fill_stat_counter_hwcounters` and
/// `stat_get_doit_default_counter` put it: per counter `rdma_nl_stat_hwcounter_entry`, the
/// name, then the value through `nla_put_u64_64bit`, which puts a `RDMA_NLDEV_ATTR_PAD`
/// before it where the value would be unaligned. Here a pad goes after every name whose
/// attribute ends on 8 bytes, so both forms are read.
pub fn hw_counters(counters: &[Counter]) -> Vec<u8> {
    let entries: Vec<Vec<u8>> = counters
        .iter()
        .map(|counter| {
            let name = string(attr::STAT_HWCOUNTER_ENTRY_NAME, &counter.name);
            let pad = match name.len() % 8 {
                0 => attribute(0, &[]),
                _ => Vec::new(),
            };
            let value = u64(attr::STAT_HWCOUNTER_ENTRY_VALUE, counter.value);
            nested(attr::STAT_HWCOUNTER_ENTRY, &[name, pad, value])
        })
        .collect();
    nested(attr::STAT_HWCOUNTERS, &entries)
}

/// One request's replies as `tests/lab/helpers/rdma_nl_capture.c` wrote them (each
/// datagram after its length, a native u32), fed to the decoder as the socket would.
pub fn replay(path: &std::path::Path, command: Command, device: Option<u32>) -> Dump {
    let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let mut dump = Dump::new(command, device, 1);
    let mut rest = &bytes[..];
    while let Some((length, after)) = rest.split_first_chunk::<4>() {
        let (datagram, after) = after.split_at(u32::from_ne_bytes(*length) as usize);
        dump.feed(datagram)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        rest = after;
    }
    assert!(dump.is_done(), "{}: incomplete", path.display());
    dump
}

/// The real kernels' captures in `tests/fixtures/rdma_netlink/<release>/`.
pub fn fixtures(release: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/rdma_netlink")
        .join(release)
}

pub fn device(device: &Device, sequence: u32) -> Vec<u8> {
    let payload = [
        u32(attr::DEV_INDEX, device.index),
        string(attr::DEV_NAME, &device.name),
        string(5, "2.0.0"), // RDMA_NLDEV_ATTR_FW_VERSION
    ]
    .concat();
    message(Command::Devices.message_type(), 0x2, sequence, &payload)
}
