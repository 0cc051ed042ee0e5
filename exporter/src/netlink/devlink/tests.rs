//! The dump request checked byte by byte against `include/uapi/linux/devlink.h`; replies
//! written as `devlink_nl_health_reporter_fill()` writes them, with mlx5's reporters (`fw`,
//! `fw_fatal` in `drivers/net/ethernet/mellanox/mlx5/core/health.c`; `tx`, `rx` in
//! `en/reporter_tx.c`, `en/reporter_rx.c`); the running kernel's dump.

use super::*;
use crate::netlink::generic::{attribute, string_attribute, NLA_F_NESTED};

/// The devlink family as the tests' kernel numbers it.
pub(super) const DEVLINK: Family = Family {
    id: 0x14,
    version: VERSION,
};

/// The payload of one dump message for `reporter`, attribute by attribute as the kernel
/// writes them (`nla_put_u64_64bit` needs no pad on x86-64).
pub(super) fn reporter_payload(reporter: &Reporter) -> Vec<u8> {
    let mut out = Vec::new();
    string_attribute(&mut out, BUS_NAME, &reporter.bus);
    string_attribute(&mut out, DEV_NAME, &reporter.device);
    if let Some(port) = reporter.port {
        attribute(&mut out, PORT_INDEX, &port.to_ne_bytes());
    }
    let mut nest = Vec::new();
    string_attribute(&mut nest, REPORTER_NAME, &reporter.name);
    attribute(&mut nest, REPORTER_STATE, &[u8::from(!reporter.healthy)]);
    attribute(
        &mut nest,
        REPORTER_ERR_COUNT,
        &reporter.errors.to_ne_bytes(),
    );
    attribute(
        &mut nest,
        REPORTER_RECOVER_COUNT,
        &reporter.recoveries.to_ne_bytes(),
    );
    // DEVLINK_ATTR_HEALTH_REPORTER_GRACEFUL_PERIOD and _AUTO_RECOVER, which a reporter with
    // a recover op adds: not read.
    attribute(&mut nest, 120, &500u64.to_ne_bytes());
    attribute(&mut nest, 121, &[1]);
    attribute(&mut out, HEALTH_REPORTER | NLA_F_NESTED, &nest);
    out
}

pub(super) fn mlx5(name: &str, port: Option<u32>) -> Reporter {
    Reporter {
        bus: "pci".into(),
        device: "0000:3b:00.0".into(),
        port,
        name: name.into(),
        healthy: true,
        errors: 0,
        recoveries: 0,
    }
}

#[test]
fn the_request_is_a_dump_without_a_handle() {
    let request = health_reporters_request(DEVLINK, 3);
    let mut expected = Vec::new();
    expected.extend(20u32.to_ne_bytes()); // length: headers only
    expected.extend(0x14u16.to_ne_bytes()); // the family's id
    expected.extend(0x301u16.to_ne_bytes()); // NLM_F_REQUEST | NLM_F_DUMP
    expected.extend(3u32.to_ne_bytes());
    expected.extend(0u32.to_ne_bytes());
    expected.extend([52, 1, 0, 0]); // DEVLINK_CMD_HEALTH_REPORTER_GET, version 1
    assert_eq!(request, expected);
}

#[test]
fn an_instance_reporter_decodes() {
    let mut payload = Vec::new();
    payload.extend([8, 0, 1, 0]); // DEVLINK_ATTR_BUS_NAME
    payload.extend(b"pci\0");
    payload.extend([17, 0, 2, 0]); // DEVLINK_ATTR_DEV_NAME
    payload.extend(b"0000:3b:00.0\0\0\0\0");
    payload.extend([64, 0, 114, 0x80]); // nested DEVLINK_ATTR_HEALTH_REPORTER
    payload.extend([13, 0, 115, 0]); // _NAME
    payload.extend(b"fw_fatal\0\0\0\0");
    payload.extend([5, 0, 116, 0, 1, 0, 0, 0]); // _STATE: error
    payload.extend([12, 0, 117, 0]); // _ERR_COUNT
    payload.extend(2u64.to_ne_bytes());
    payload.extend([12, 0, 118, 0]); // _RECOVER_COUNT
    payload.extend(1u64.to_ne_bytes());
    payload.extend([12, 0, 119, 0]); // _DUMP_TS: not read
    payload.extend(9u64.to_ne_bytes());
    let expected = Reporter {
        healthy: false,
        errors: 2,
        recoveries: 1,
        ..mlx5("fw_fatal", None)
    };
    assert_eq!(health_reporter(&payload), Ok(expected));
}

#[test]
fn a_port_reporter_has_its_port_index() {
    let tx = Reporter {
        errors: 7,
        recoveries: 7,
        ..mlx5("tx", Some(131071))
    };
    assert_eq!(health_reporter(&reporter_payload(&tx)), Ok(tx));
    let rx = mlx5("rx", Some(131071));
    assert_eq!(health_reporter(&reporter_payload(&rx)), Ok(rx));
}

#[test]
fn a_message_without_its_parts_is_malformed() {
    let whole = reporter_payload(&mlx5("fw", None));
    assert_eq!(health_reporter(&whole[..12]), Err(ReplyError::Malformed));
    let mut handle_only = Vec::new();
    string_attribute(&mut handle_only, BUS_NAME, "pci");
    string_attribute(&mut handle_only, DEV_NAME, "0000:3b:00.0");
    assert_eq!(health_reporter(&handle_only), Err(ReplyError::Malformed));
    let mut short_count = handle_only.clone();
    let mut nest = Vec::new();
    string_attribute(&mut nest, REPORTER_NAME, "fw");
    attribute(&mut nest, REPORTER_STATE, &[0]);
    attribute(&mut nest, REPORTER_ERR_COUNT, &[1, 0, 0, 0]);
    attribute(&mut nest, REPORTER_RECOVER_COUNT, &0u64.to_ne_bytes());
    attribute(&mut short_count, HEALTH_REPORTER | NLA_F_NESTED, &nest);
    assert_eq!(health_reporter(&short_count), Err(ReplyError::Malformed));
}

/// The running kernel dumps its reporters without a privilege and without error: none on a
/// node without devlink instances; a kernel without devlink has no family (`ENOENT`).
#[test]
fn the_running_kernel_dumps_its_reporters() {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    match socket::Socket::open(deadline) {
        Ok(mut socket) => {
            let reporters = socket.health_reporters(deadline).expect("a dump");
            assert!(reporters.iter().all(|reporter| !reporter.name.is_empty()));
        }
        Err(crate::netlink::generic::socket::ExchangeError::Reply(ReplyError::Kernel(
            libc::ENOENT,
        ))) => {}
        Err(err) => panic!("{err}"),
    }
}
