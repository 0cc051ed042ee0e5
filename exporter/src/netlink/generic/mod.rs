//! Generic netlink as its families share it: messages with the command header, attributes,
//! the family's id looked up by name (`CTRL_CMD_GETFAMILY`), a reply's first message and a
//! dump's messages up to `NLMSG_DONE`. Plain code: `socket.rs` is the only code that sends
//! them, for `ethtool/` and `devlink/`. Numbers from `include/uapi/linux/genetlink.h` and
//! `netlink.h`.

pub mod socket;

use crate::netlink::datagram::{NLMSG_ERROR, NLMSG_HEADER_LEN, NLM_F_REQUEST};

/// `GENL_ID_CTRL` and `CTRL_CMD_NEWFAMILY` (the reply), `CTRL_CMD_GETFAMILY`,
/// `CTRL_ATTR_FAMILY_ID`, `CTRL_ATTR_FAMILY_NAME`.
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_NEWFAMILY: u8 = 1;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// The version a request to the controller names (the controller does not check it).
const CTRL_VERSION: u8 = 1;
/// `NLMSG_DONE`, the message that ends a dump, and `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
const NLMSG_DONE: u16 = 3;
pub const NLM_F_DUMP: u16 = 0x300;

pub const NLA_F_NESTED: u16 = 1 << 15;
const GENL_HEADER_LEN: usize = 4;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("the kernel answered errno {0}")]
    Kernel(i32),
    #[error("malformed reply")]
    Malformed,
    #[error("no such generic netlink family")]
    NoFamily,
}

/// A family's id and version, as a request names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Family {
    pub id: u16,
    pub version: u8,
}

/// `CTRL_CMD_GETFAMILY` for the family `name`.
pub fn family_request(name: &str, sequence: u32) -> Vec<u8> {
    let controller = Family {
        id: GENL_ID_CTRL,
        version: CTRL_VERSION,
    };
    message(
        controller,
        CTRL_CMD_GETFAMILY,
        NLM_F_REQUEST,
        sequence,
        |out| string_attribute(out, CTRL_ATTR_FAMILY_NAME, name),
    )
}

/// The family id in a `CTRL_CMD_GETFAMILY` reply datagram.
pub fn family_reply(datagram: &[u8]) -> Result<u16, ReplyError> {
    let payload = reply(datagram, GENL_ID_CTRL, CTRL_CMD_NEWFAMILY)?;
    let id = attributes(payload)?
        .find(|&(kind, _)| kind == CTRL_ATTR_FAMILY_ID)
        .ok_or(ReplyError::NoFamily)?
        .1;
    Ok(u16::from_ne_bytes(
        id.try_into().map_err(|_| ReplyError::Malformed)?,
    ))
}

/// A request of `family`: netlink header with `flags`, command header, then what `body` adds.
/// No NLM_F_ACK: a reply is the answer, and an error comes as NLMSG_ERROR anyway.
pub fn message(
    family: Family,
    command: u8,
    flags: u16,
    sequence: u32,
    body: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let mut out = vec![0; NLMSG_HEADER_LEN];
    out.extend([command, family.version, 0, 0]);
    body(&mut out);
    let length = out.len() as u32;
    out[0..4].copy_from_slice(&length.to_ne_bytes());
    out[4..6].copy_from_slice(&family.id.to_ne_bytes());
    out[6..8].copy_from_slice(&flags.to_ne_bytes());
    out[8..12].copy_from_slice(&sequence.to_ne_bytes());
    out
}

pub fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend(((4 + value.len()) as u16).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    out.extend(value);
    out.resize(aligned(out.len()), 0);
}

/// A NUL-terminated string attribute (`NLA_NUL_STRING`, `NLA_STRING`).
pub fn string_attribute(out: &mut Vec<u8>, kind: u16, value: &str) {
    let mut bytes = value.as_bytes().to_vec();
    bytes.push(0);
    attribute(out, kind, &bytes);
}

fn aligned(length: usize) -> usize {
    (length + 3) & !3
}

/// The sequence number a datagram answers, if it is long enough to say.
pub fn sequence(datagram: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(datagram.get(8..12)?.try_into().ok()?))
}

/// One netlink message of a datagram: its type and what follows its header.
struct Message<'a> {
    kind: u16,
    body: &'a [u8],
}

/// The messages of a datagram, each checked to lie within it.
fn messages(mut datagram: &[u8]) -> Result<Vec<Message<'_>>, ReplyError> {
    let mut found = Vec::new();
    while !datagram.is_empty() {
        let header = datagram
            .get(..NLMSG_HEADER_LEN)
            .ok_or(ReplyError::Malformed)?;
        let length = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes([header[4], header[5]]);
        let body = datagram
            .get(NLMSG_HEADER_LEN..length.max(NLMSG_HEADER_LEN))
            .ok_or(ReplyError::Malformed)?;
        found.push(Message { kind, body });
        datagram = datagram
            .get(aligned(length.max(NLMSG_HEADER_LEN)).min(datagram.len())..)
            .unwrap_or_default();
    }
    Ok(found)
}

/// The generic netlink payload (after the command header) of a message that must be
/// `command` of `kind`, or the kernel's error.
fn payload<'a>(message: &Message<'a>, kind: u16, command: u8) -> Result<&'a [u8], ReplyError> {
    if message.kind == NLMSG_ERROR {
        let errno = message.body.get(..4).ok_or(ReplyError::Malformed)?;
        return Err(ReplyError::Kernel(-i32::from_ne_bytes(
            errno.try_into().expect("4 bytes"),
        )));
    }
    if message.kind != kind || message.body.first() != Some(&command) {
        return Err(ReplyError::Malformed);
    }
    message
        .body
        .get(GENL_HEADER_LEN..)
        .ok_or(ReplyError::Malformed)
}

/// The payload of the first message of a reply datagram, which must be `command` of `kind`.
pub fn reply(datagram: &[u8], kind: u16, command: u8) -> Result<&[u8], ReplyError> {
    let messages = messages(datagram)?;
    let first = messages.first().ok_or(ReplyError::Malformed)?;
    payload(first, kind, command)
}

/// One datagram of a dump: the payloads of its `command` messages of `kind`, and whether it
/// ended the dump (`NLMSG_DONE`, whose body is the dump's result: 0, or a negative errno).
pub fn dump_part(
    datagram: &[u8],
    kind: u16,
    command: u8,
) -> Result<(Vec<&[u8]>, bool), ReplyError> {
    let mut payloads = Vec::new();
    for message in messages(datagram)? {
        if message.kind == NLMSG_DONE {
            let result = message.body.get(..4).ok_or(ReplyError::Malformed)?;
            return match i32::from_ne_bytes(result.try_into().expect("4 bytes")) {
                0 => Ok((payloads, true)),
                errno => Err(ReplyError::Kernel(-errno)),
            };
        }
        payloads.push(payload(&message, kind, command)?);
    }
    Ok((payloads, false))
}

/// The attributes of a payload or a nest, each checked to lie within it; the kind without
/// its nested and byte-order flags.
pub fn attributes(mut bytes: &[u8]) -> Result<impl Iterator<Item = (u16, &[u8])>, ReplyError> {
    let mut found = Vec::new();
    while bytes.len() >= 4 {
        let length = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        let value = bytes.get(4..length).ok_or(ReplyError::Malformed)?;
        found.push((kind, value));
        bytes = bytes
            .get(aligned(length).min(bytes.len())..)
            .unwrap_or_default();
    }
    Ok(found.into_iter())
}

/// A `u64` attribute's value (`nla_put_u64_64bit`, native byte order).
pub fn u64_value(value: &[u8]) -> Result<u64, ReplyError> {
    Ok(u64::from_ne_bytes(
        value.try_into().map_err(|_| ReplyError::Malformed)?,
    ))
}

/// A string attribute's value, without its NUL.
pub fn string_value(value: &[u8]) -> Result<String, ReplyError> {
    let text = value.strip_suffix(&[0]).unwrap_or(value);
    String::from_utf8(text.to_vec()).map_err(|_| ReplyError::Malformed)
}

#[cfg(test)]
pub(crate) mod tests;
