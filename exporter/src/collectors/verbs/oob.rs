//! The out-of-band exchange over TCP that lets two exporters connect their queue pairs.
//!
//! Every message is one frame: magic `HPVB`, the protocol version ([`VERSION`]), a kind byte, a
//! big-endian u16 payload length (at most [`MAX_PAYLOAD`]) and the payload, whose size is fixed
//! per kind. [`decode`] is a pure function over bytes; every read and write is under a timeout,
//! and a whole frame must arrive within one (a peer dripping a byte at a time gets no longer).
//!
//! Session (client C, responder R), version 2: C->R `Hello` (C's nonce, C's endpoint,
//! ping-pong count); R->C `Challenge` (R's nonce) or `Reject`; C->R `Proof` (HMAC over the
//! transcript, [`super::auth`]); R->C `Accept` (R's endpoint and R's own proof) or `Reject`;
//! C runs the bandwidth writes; C->R `Latency`; R echoes the ping-pongs; C->R `Done`. The token
//! itself never crosses the wire. Version 1 sent the token in its `Hello`; a frame of another
//! version is a [`DecodeError::Version`], which names both.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::engine::Endpoint;

const MAGIC: &[u8; 4] = b"HPVB";
/// The protocol version this exporter speaks (and the only one it accepts).
pub const VERSION: u8 = 2;
const HEADER: usize = 8;
pub const MAX_PAYLOAD: usize = 128;
/// The longest shared token (the HMAC key).
pub const MAX_TOKEN: usize = 64;
/// Nonces and proofs: 32 bytes (an HMAC-SHA256 tag).
pub const NONCE_LEN: usize = 32;
pub const PROOF_LEN: usize = 32;
const ENDPOINT_LEN: usize = 4 + 4 + 2 + 16 + 4 + 8 + 8 + 1;
const HELLO_LEN: usize = NONCE_LEN + ENDPOINT_LEN + 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    BadToken,
    Busy,
    TooLarge,
    Failed,
    Version,
}

impl RejectReason {
    fn code(self) -> u8 {
        match self {
            RejectReason::BadToken => 1,
            RejectReason::Busy => 2,
            RejectReason::TooLarge => 3,
            RejectReason::Failed => 4,
            RejectReason::Version => 5,
        }
    }

    fn from_code(code: u8) -> Option<RejectReason> {
        [
            RejectReason::BadToken,
            RejectReason::Busy,
            RejectReason::TooLarge,
            RejectReason::Failed,
            RejectReason::Version,
        ]
        .into_iter()
        .find(|reason| reason.code() == code)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::BadToken => "wrong token (the proof of it did not verify)",
            RejectReason::Busy => "busy with another session",
            RejectReason::TooLarge => "message size above the responder's limit",
            RejectReason::Failed => "responder failed to set up its queue pair",
            RejectReason::Version => "it speaks another protocol version",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello {
        nonce: [u8; NONCE_LEN],
        endpoint: Endpoint,
        latency_iterations: u32,
    },
    Challenge {
        nonce: [u8; NONCE_LEN],
    },
    Proof {
        proof: [u8; PROOF_LEN],
    },
    Accept {
        endpoint: Endpoint,
        proof: [u8; PROOF_LEN],
    },
    Reject {
        reason: RejectReason,
    },
    Latency,
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("incomplete message")]
    Incomplete,
    #[error("not a verbs probe message (bad magic)")]
    Magic,
    #[error("peer speaks protocol version {0}, this exporter version {VERSION}")]
    Version(u8),
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("payload length {0} out of bounds")]
    Length(usize),
    #[error("malformed {0} payload")]
    Payload(&'static str),
}

impl Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Hello { .. } => 1,
            Message::Accept { .. } => 2,
            Message::Reject { .. } => 3,
            Message::Latency => 4,
            Message::Done => 5,
            Message::Challenge { .. } => 6,
            Message::Proof { .. } => 7,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(MAX_PAYLOAD);
        match self {
            Message::Hello {
                nonce,
                endpoint,
                latency_iterations,
            } => {
                payload.extend_from_slice(nonce);
                put_endpoint(&mut payload, endpoint);
                payload.extend_from_slice(&latency_iterations.to_be_bytes());
            }
            Message::Challenge { nonce } => payload.extend_from_slice(nonce),
            Message::Proof { proof } => payload.extend_from_slice(proof),
            Message::Accept { endpoint, proof } => {
                put_endpoint(&mut payload, endpoint);
                payload.extend_from_slice(proof);
            }
            Message::Reject { reason } => payload.push(reason.code()),
            Message::Latency | Message::Done => {}
        }
        let mut frame = Vec::with_capacity(HEADER + payload.len());
        frame.extend_from_slice(MAGIC);
        frame.push(VERSION);
        frame.push(self.kind());
        frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        frame.extend_from_slice(&payload);
        frame
    }
}

/// An endpoint's wire form, which the handshake's proofs also cover.
pub(super) fn put_endpoint(out: &mut Vec<u8>, e: &Endpoint) {
    out.extend_from_slice(&e.qp_num.to_be_bytes());
    out.extend_from_slice(&e.psn.to_be_bytes());
    out.extend_from_slice(&e.lid.to_be_bytes());
    out.extend_from_slice(&e.gid);
    out.extend_from_slice(&e.rkey.to_be_bytes());
    out.extend_from_slice(&e.addr.to_be_bytes());
    out.extend_from_slice(&e.len.to_be_bytes());
    out.push(e.mtu);
}

/// Reads fixed-size fields off a payload; every read is bounds-checked.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    fn endpoint(&mut self) -> Option<Endpoint> {
        Some(Endpoint {
            qp_num: u32::from_be_bytes(self.take()?),
            psn: u32::from_be_bytes(self.take()?),
            lid: u16::from_be_bytes(self.take()?),
            gid: self.take()?,
            rkey: u32::from_be_bytes(self.take()?),
            addr: u64::from_be_bytes(self.take()?),
            len: u64::from_be_bytes(self.take()?),
            mtu: u8::from_be_bytes(self.take()?),
        })
    }
}

/// The payload length a header announces, after checking magic, version and bounds.
fn header(bytes: &[u8]) -> Result<(u8, usize), DecodeError> {
    let Some(head) = bytes.first_chunk::<HEADER>() else {
        // A prefix that already disagrees with the magic is not worth waiting for.
        let seen = bytes.len().min(MAGIC.len());
        return Err(if bytes[..seen] == MAGIC[..seen] {
            DecodeError::Incomplete
        } else {
            DecodeError::Magic
        });
    };
    if &head[..4] != MAGIC {
        return Err(DecodeError::Magic);
    }
    if head[4] != VERSION {
        return Err(DecodeError::Version(head[4]));
    }
    let len = usize::from(u16::from_be_bytes([head[6], head[7]]));
    if len > MAX_PAYLOAD {
        return Err(DecodeError::Length(len));
    }
    Ok((head[5], len))
}

/// Decodes the frame at the start of `bytes`: the message and how many bytes it took.
pub fn decode(bytes: &[u8]) -> Result<(Message, usize), DecodeError> {
    let (kind, len) = header(bytes)?;
    let payload = bytes
        .get(HEADER..HEADER + len)
        .ok_or(DecodeError::Incomplete)?;
    let mut fields = Fields(payload);
    let malformed = |what| move || DecodeError::Payload(what);
    let message = match kind {
        1 if len == HELLO_LEN => Message::Hello {
            nonce: fields.take().ok_or_else(malformed("hello"))?,
            endpoint: fields.endpoint().ok_or_else(malformed("hello"))?,
            latency_iterations: u32::from_be_bytes(fields.take().ok_or_else(malformed("hello"))?),
        },
        2 if len == ENDPOINT_LEN + PROOF_LEN => Message::Accept {
            endpoint: fields.endpoint().ok_or_else(malformed("accept"))?,
            proof: fields.take().ok_or_else(malformed("accept"))?,
        },
        3 if len == 1 => Message::Reject {
            reason: RejectReason::from_code(payload[0]).ok_or_else(malformed("reject"))?,
        },
        4 if len == 0 => Message::Latency,
        5 if len == 0 => Message::Done,
        6 if len == NONCE_LEN => Message::Challenge {
            nonce: fields.take().ok_or_else(malformed("challenge"))?,
        },
        7 if len == PROOF_LEN => Message::Proof {
            proof: fields.take().ok_or_else(malformed("proof"))?,
        },
        1..=7 => return Err(DecodeError::Length(len)),
        other => return Err(DecodeError::Kind(other)),
    };
    Ok((message, HEADER + len))
}

#[derive(Debug, thiserror::Error)]
pub enum OobError {
    #[error("peer sent a bad message: {0}")]
    Decode(#[from] DecodeError),
    #[error("peer did not answer in time")]
    Timeout,
    #[error("peer closed the connection")]
    Closed,
    #[error("out-of-band connection: {0}")]
    Io(std::io::Error),
    #[error("unexpected {0} message")]
    Unexpected(&'static str),
}

impl From<std::io::Error> for OobError {
    fn from(err: std::io::Error) -> Self {
        match err.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => OobError::Timeout,
            std::io::ErrorKind::UnexpectedEof => OobError::Closed,
            _ => OobError::Io(err),
        }
    }
}

/// A TCP connection carrying frames: every write under `timeout`, every frame read within it,
/// and all of them by the deadline when one is set.
pub struct Channel {
    stream: TcpStream,
    timeout: Duration,
    deadline: Option<Instant>,
}

impl Channel {
    pub fn new(stream: TcpStream, timeout: Duration) -> Result<Channel, OobError> {
        stream.set_nodelay(true)?;
        let mut channel = Channel {
            stream,
            timeout: Duration::ZERO,
            deadline: None,
        };
        channel.set_timeout(timeout)?;
        Ok(channel)
    }

    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), OobError> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        self.timeout = timeout;
        Ok(())
    }

    /// Every read and write ends by `deadline` (a handshake's), however many frames it takes;
    /// `None`: each under the timeout alone.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// When what starts now must end: a timeout from now, or the deadline if sooner.
    fn step_end(&self) -> Instant {
        let end = Instant::now() + self.timeout;
        self.deadline.map_or(end, |deadline| deadline.min(end))
    }

    pub fn send(&mut self, message: &Message) -> Result<(), OobError> {
        let left = self.step_end().saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(OobError::Timeout);
        }
        self.stream.set_write_timeout(Some(left))?;
        Ok(self.stream.write_all(&message.encode())?)
    }

    /// Reads one frame, all of it within the timeout (and by the deadline): the header first
    /// (rejected before anything more is read), then exactly the payload it announces.
    pub fn receive(&mut self) -> Result<Message, OobError> {
        let deadline = self.step_end();
        let mut frame = [0u8; HEADER + MAX_PAYLOAD];
        self.read_exact(&mut frame[..HEADER], deadline)?;
        let (_, len) = header(&frame[..HEADER]).inspect_err(|err| {
            if matches!(err, DecodeError::Version(_)) {
                self.discard_payload(&frame, deadline);
            }
        })?;
        self.read_exact(&mut frame[HEADER..HEADER + len], deadline)?;
        Ok(decode(&frame[..HEADER + len])?.0)
    }

    /// Reads the payload a frame of another version announces (if within bounds): closing
    /// with it unread would reset the connection, and the peer might lose the reply that
    /// names the version.
    fn discard_payload(&mut self, header: &[u8; HEADER + MAX_PAYLOAD], deadline: Instant) {
        let len = usize::from(u16::from_be_bytes([header[6], header[7]]));
        let mut payload = [0u8; MAX_PAYLOAD];
        if let Some(payload) = payload.get_mut(..len) {
            let _ = self.read_exact(payload, deadline);
        }
    }

    /// Fills `buf` by `deadline`: each read waits only for what is left of it, so that a peer
    /// sending a byte at a time cannot stretch one frame to a timeout per byte.
    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> Result<(), OobError> {
        let mut filled = 0;
        while filled < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(OobError::Timeout);
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut buf[filled..]) {
                Ok(0) => return Err(OobError::Closed),
                Ok(n) => filled += n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::bytes;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn endpoint() -> impl Strategy<Value = Endpoint> {
        (
            any::<(u32, u32, u16, [u8; 16])>(),
            any::<(u32, u64, u64, u8)>(),
        )
            .prop_map(
                |((qp_num, psn, lid, gid), (rkey, addr, len, mtu))| Endpoint {
                    qp_num,
                    psn,
                    lid,
                    gid,
                    rkey,
                    addr,
                    len,
                    mtu,
                },
            )
    }

    /// Every message a peer may send.
    fn message() -> impl Strategy<Value = Message> {
        let reason = prop::sample::select(
            &[
                RejectReason::BadToken,
                RejectReason::Busy,
                RejectReason::TooLarge,
                RejectReason::Failed,
                RejectReason::Version,
            ][..],
        );
        prop_oneof![
            (any::<[u8; NONCE_LEN]>(), endpoint(), any::<u32>()).prop_map(
                |(nonce, endpoint, latency_iterations)| Message::Hello {
                    nonce,
                    endpoint,
                    latency_iterations,
                }
            ),
            any::<[u8; NONCE_LEN]>().prop_map(|nonce| Message::Challenge { nonce }),
            any::<[u8; PROOF_LEN]>().prop_map(|proof| Message::Proof { proof }),
            (endpoint(), any::<[u8; PROOF_LEN]>())
                .prop_map(|(endpoint, proof)| Message::Accept { endpoint, proof }),
            reason.prop_map(|reason| Message::Reject { reason }),
            Just(Message::Latency),
            Just(Message::Done),
        ]
    }

    proptest! {
        #[test]
        fn messages_in_a_stream_decode_in_order(messages in vec(message(), 1..6)) {
            let stream: Vec<u8> = messages.iter().flat_map(Message::encode).collect();
            let mut rest = &stream[..];
            for message in messages {
                let (decoded, used) = decode(rest).unwrap();
                prop_assert!(used <= HEADER + MAX_PAYLOAD);
                prop_assert_eq!(decoded, message);
                rest = &rest[used..];
            }
            prop_assert!(rest.is_empty());
        }

        #[test]
        fn a_cut_frame_is_incomplete(message in message(), cut in any::<prop::sample::Index>()) {
            let frame = message.encode();
            let cut = cut.index(frame.len());
            prop_assert_eq!(decode(&frame[..cut]), Err(DecodeError::Incomplete));
        }

        /// One changed byte: another message, or an error, never a panic or a frame that
        /// claims more bytes than it has.
        #[test]
        fn a_corrupted_frame_is_a_message_or_an_error(
            message in message(),
            at in any::<prop::sample::Index>(),
            value: u8,
            tail in bytes(&["HPVB", "\x02"]),
        ) {
            let mut frame = message.encode();
            let at = at.index(frame.len());
            frame[at] = value;
            frame.extend_from_slice(&tail);
            if let Ok((decoded, used)) = decode(&frame) {
                prop_assert!(used <= frame.len());
                prop_assert_eq!(decode(&decoded.encode()), Ok((decoded.clone(), used)));
            }
        }
    }
}
