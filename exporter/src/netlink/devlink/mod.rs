//! Devlink over generic netlink (family `devlink`): every instance's health reporters in one
//! dump (`DEVLINK_CMD_HEALTH_REPORTER_GET` without a handle). The dump lists each instance's
//! reporters and, from Linux 5.9, its ports' (`devlink_nl_cmd_health_reporter_get_dumpit()`
//! in `net/core/devlink.c` for 5.10 and 6.1, `devlink_nl_health_reporter_get_dumpit()` in
//! `net/devlink/health.c` for 6.12), and needs no privilege ("can be retrieved by
//! unprivileged users" in 5.10 and 6.1; no `GENL_ADMIN_PERM` in 6.12's
//! `net/devlink/netlink_gen.c`); it reads the reporters' counts, no firmware. Requests and
//! replies are built and decoded here by plain code over `generic/`; `socket.rs` is the only
//! code that sends them. Numbers from `include/uapi/linux/devlink.h`.

pub mod socket;

use crate::netlink::datagram::NLM_F_REQUEST;
use crate::netlink::generic::{
    attributes, message, string_value, u64_value, Family, ReplyError, NLM_F_DUMP,
};

/// `DEVLINK_GENL_NAME`, `DEVLINK_GENL_VERSION`.
pub const FAMILY: &str = "devlink";
pub const VERSION: u8 = 1;
/// `DEVLINK_CMD_HEALTH_REPORTER_GET`, the request's command and its replies'.
pub const HEALTH_REPORTER_GET: u8 = 52;
/// `DEVLINK_ATTR_BUS_NAME`, `_DEV_NAME`, `_PORT_INDEX`, `_HEALTH_REPORTER` (a nest) and in it
/// `_HEALTH_REPORTER_NAME`, `_STATE`, `_ERR_COUNT`, `_RECOVER_COUNT`.
const BUS_NAME: u16 = 1;
const DEV_NAME: u16 = 2;
const PORT_INDEX: u16 = 3;
const HEALTH_REPORTER: u16 = 114;
const REPORTER_NAME: u16 = 115;
const REPORTER_STATE: u16 = 116;
const REPORTER_ERR_COUNT: u16 = 117;
const REPORTER_RECOVER_COUNT: u16 = 118;
/// `DEVLINK_HEALTH_REPORTER_STATE_HEALTHY` (the other, 1, is `_ERROR`).
const STATE_HEALTHY: u8 = 0;

/// One health reporter of a devlink instance (`bus`/`device`, as `pci`/`0000:3b:00.0`) or of
/// one of its ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reporter {
    pub bus: String,
    pub device: String,
    /// The devlink port index of a port's reporter (mlx5's `tx` and `rx` on newer kernels).
    pub port: Option<u32>,
    pub name: String,
    pub healthy: bool,
    pub errors: u64,
    pub recoveries: u64,
}

/// `DEVLINK_CMD_HEALTH_REPORTER_GET` as a dump of every instance's reporters.
pub fn health_reporters_request(family: Family, sequence: u32) -> Vec<u8> {
    message(
        family,
        HEALTH_REPORTER_GET,
        NLM_F_REQUEST | NLM_F_DUMP,
        sequence,
        |_| {},
    )
}

/// The reporter in one message of the dump, as `devlink_nl_health_reporter_fill()` writes it:
/// the handle, the port index of a port's reporter, then the reporter's nest.
pub fn health_reporter(payload: &[u8]) -> Result<Reporter, ReplyError> {
    let (mut bus, mut device, mut port, mut nest) = (None, None, None, None);
    for (kind, value) in attributes(payload)? {
        match kind {
            BUS_NAME => bus = Some(string_value(value)?),
            DEV_NAME => device = Some(string_value(value)?),
            PORT_INDEX => {
                let index = value.try_into().map_err(|_| ReplyError::Malformed)?;
                port = Some(u32::from_ne_bytes(index));
            }
            HEALTH_REPORTER => nest = Some(value),
            _ => {}
        }
    }
    let (mut name, mut state, mut errors, mut recoveries) = (None, None, None, None);
    for (kind, value) in attributes(nest.ok_or(ReplyError::Malformed)?)? {
        match kind {
            REPORTER_NAME => name = Some(string_value(value)?),
            REPORTER_STATE => state = value.first().copied(),
            REPORTER_ERR_COUNT => errors = Some(u64_value(value)?),
            REPORTER_RECOVER_COUNT => recoveries = Some(u64_value(value)?),
            _ => {}
        }
    }
    let missing = || ReplyError::Malformed;
    Ok(Reporter {
        bus: bus.ok_or_else(missing)?,
        device: device.ok_or_else(missing)?,
        port,
        name: name.ok_or_else(missing)?,
        healthy: state.ok_or_else(missing)? == STATE_HEALTHY,
        errors: errors.ok_or_else(missing)?,
        recoveries: recoveries.ok_or_else(missing)?,
    })
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
