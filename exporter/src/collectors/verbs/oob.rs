//! The out-of-band exchange over TCP that lets two exporters connect their queue pairs.
//!
//! Every message is one frame: magic `HPVB`, version 1, a kind byte, a big-endian u16 payload
//! length (at most [`MAX_PAYLOAD`]) and the payload, whose size is fixed per kind (the token
//! aside). [`decode`] is a pure function over bytes; every read and write is under a timeout,
//! and a whole frame must arrive within one (a peer dripping a byte at a time gets no longer).
//!
//! Session (client C, responder R): C->R `Hello` (token, C's endpoint, ping-pong count);
//! R->C `Accept` (R's endpoint) or `Reject`; C runs the bandwidth writes; C->R `Latency`;
//! R echoes the ping-pongs; C->R `Done`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::engine::Endpoint;

const MAGIC: &[u8; 4] = b"HPVB";
const VERSION: u8 = 1;
const HEADER: usize = 8;
pub const MAX_PAYLOAD: usize = 128;
pub const MAX_TOKEN: usize = 64;
const ENDPOINT_LEN: usize = 4 + 4 + 2 + 16 + 4 + 8 + 8 + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    BadToken,
    Busy,
    TooLarge,
    Failed,
}

impl RejectReason {
    fn code(self) -> u8 {
        match self {
            RejectReason::BadToken => 1,
            RejectReason::Busy => 2,
            RejectReason::TooLarge => 3,
            RejectReason::Failed => 4,
        }
    }

    fn from_code(code: u8) -> Option<RejectReason> {
        [
            RejectReason::BadToken,
            RejectReason::Busy,
            RejectReason::TooLarge,
            RejectReason::Failed,
        ]
        .into_iter()
        .find(|reason| reason.code() == code)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::BadToken => "wrong token",
            RejectReason::Busy => "busy with another session",
            RejectReason::TooLarge => "message size above the responder's limit",
            RejectReason::Failed => "responder failed to set up its queue pair",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello {
        token: Vec<u8>,
        endpoint: Endpoint,
        latency_iterations: u32,
    },
    Accept {
        endpoint: Endpoint,
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
    #[error("unsupported protocol version {0}")]
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
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(MAX_PAYLOAD);
        match self {
            Message::Hello {
                token,
                endpoint,
                latency_iterations,
            } => {
                put_endpoint(&mut payload, endpoint);
                payload.extend_from_slice(&latency_iterations.to_be_bytes());
                let token = &token[..token.len().min(MAX_TOKEN)];
                payload.push(token.len() as u8);
                payload.extend_from_slice(token);
            }
            Message::Accept { endpoint } => put_endpoint(&mut payload, endpoint),
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

fn put_endpoint(out: &mut Vec<u8>, e: &Endpoint) {
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
    let message = match kind {
        1 => {
            let malformed = DecodeError::Payload("hello");
            let endpoint = fields.endpoint().ok_or(malformed.clone())?;
            let latency_iterations = u32::from_be_bytes(fields.take().ok_or(malformed.clone())?);
            let [token_len] = fields.take().ok_or(malformed.clone())?;
            let token = fields.0;
            if usize::from(token_len) != token.len() || token.len() > MAX_TOKEN {
                return Err(malformed);
            }
            Message::Hello {
                token: token.to_vec(),
                endpoint,
                latency_iterations,
            }
        }
        2 if len == ENDPOINT_LEN => Message::Accept {
            endpoint: fields.endpoint().ok_or(DecodeError::Payload("accept"))?,
        },
        3 if len == 1 => Message::Reject {
            reason: RejectReason::from_code(payload[0]).ok_or(DecodeError::Payload("reject"))?,
        },
        4 if len == 0 => Message::Latency,
        5 if len == 0 => Message::Done,
        2..=5 => return Err(DecodeError::Length(len)),
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

/// A TCP connection carrying frames: every write under `timeout`, every frame read within it.
pub struct Channel {
    stream: TcpStream,
    timeout: Duration,
}

impl Channel {
    pub fn new(stream: TcpStream, timeout: Duration) -> Result<Channel, OobError> {
        stream.set_nodelay(true)?;
        let mut channel = Channel {
            stream,
            timeout: Duration::ZERO,
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

    pub fn send(&mut self, message: &Message) -> Result<(), OobError> {
        Ok(self.stream.write_all(&message.encode())?)
    }

    /// Reads one frame, all of it within the timeout: the header first (rejected before
    /// anything more is read), then exactly the payload it announces.
    pub fn receive(&mut self) -> Result<Message, OobError> {
        let deadline = Instant::now() + self.timeout;
        let mut frame = [0u8; HEADER + MAX_PAYLOAD];
        self.read_exact(&mut frame[..HEADER], deadline)?;
        let (_, len) = header(&frame[..HEADER])?;
        self.read_exact(&mut frame[HEADER..HEADER + len], deadline)?;
        Ok(decode(&frame[..HEADER + len])?.0)
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

/// Compares tokens in time independent of where they differ.
pub fn tokens_match(expected: &[u8], given: &[u8]) -> bool {
    expected.len() == given.len()
        && expected
            .iter()
            .zip(given)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn endpoint() -> Endpoint {
        Endpoint {
            qp_num: 0x11,
            psn: 0xabcdef,
            lid: 7,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            rkey: 0x1234,
            addr: 0x7f00_0000_1000,
            len: 65536,
            mtu: 3,
        }
    }

    fn all_messages() -> Vec<Message> {
        vec![
            Message::Hello {
                token: b"s3cret".to_vec(),
                endpoint: endpoint(),
                latency_iterations: 1000,
            },
            Message::Hello {
                token: Vec::new(),
                endpoint: endpoint(),
                latency_iterations: 0,
            },
            Message::Accept {
                endpoint: endpoint(),
            },
            Message::Reject {
                reason: RejectReason::Busy,
            },
            Message::Latency,
            Message::Done,
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for message in all_messages() {
            let frame = message.encode();
            assert!(frame.len() <= HEADER + MAX_PAYLOAD);
            assert_eq!(decode(&frame), Ok((message, frame.len())));
        }
    }

    #[test]
    fn every_strict_prefix_is_incomplete() {
        for message in all_messages() {
            let frame = message.encode();
            for cut in 0..frame.len() {
                assert_eq!(decode(&frame[..cut]), Err(DecodeError::Incomplete), "{cut}");
            }
        }
    }

    #[test]
    fn hostile_headers_are_rejected_before_their_payload() {
        assert_eq!(decode(b"GET / HTTP/1.1\r\n"), Err(DecodeError::Magic));
        assert_eq!(decode(b"X"), Err(DecodeError::Magic));
        assert_eq!(
            decode(b"HPVB\x02\x01\x00\x00"),
            Err(DecodeError::Version(2))
        );
        assert_eq!(
            decode(b"HPVB\x01\x01\xff\xff"),
            Err(DecodeError::Length(65535))
        );
        assert_eq!(decode(b"HPVB\x01\x09\x00\x00"), Err(DecodeError::Kind(9)));
        assert_eq!(
            decode(b"HPVB\x01\x05\x00\x01x"),
            Err(DecodeError::Length(1))
        );
        assert_eq!(
            decode(b"HPVB\x01\x03\x00\x01\x63"),
            Err(DecodeError::Payload("reject"))
        );
    }

    #[test]
    fn a_token_length_that_lies_is_malformed() {
        let mut frame = all_messages()[0].encode();
        let token_len_at = frame.len() - b"s3cret".len() - 1;
        frame[token_len_at] = 5;
        assert_eq!(decode(&frame), Err(DecodeError::Payload("hello")));
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_match(b"abc", b"abc"));
        assert!(!tokens_match(b"abc", b"abd"));
        assert!(!tokens_match(b"abc", b"ab"));
        assert!(tokens_match(b"", b""));
    }

    /// A peer that sends `frame` a byte every `gap`, on a loopback connection.
    fn dripping_peer(frame: Vec<u8>, gap: Duration) -> (TcpStream, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut stream = TcpStream::connect(address).unwrap();
            for byte in frame {
                if stream.write_all(&[byte]).is_err() {
                    return;
                }
                std::thread::sleep(gap);
            }
        });
        (listener.accept().unwrap().0, writer)
    }

    #[test]
    fn a_frame_dripped_a_byte_at_a_time_times_out_once() {
        let frame = all_messages()[0].encode();
        let gap = Duration::from_millis(20);
        // Every byte comes well within the timeout, the whole frame does not.
        let (stream, writer) = dripping_peer(frame.clone(), gap);
        let timeout = Duration::from_millis(300);
        assert!(gap * frame.len() as u32 > timeout * 3);
        let mut channel = Channel::new(stream, timeout).unwrap();
        let started = Instant::now();
        assert!(matches!(channel.receive(), Err(OobError::Timeout)));
        assert!(started.elapsed() < timeout * 2, "{:?}", started.elapsed());
        drop(channel);
        writer.join().unwrap();

        // The same drip within the timeout is one message.
        let (stream, writer) = dripping_peer(frame, Duration::from_millis(1));
        let mut channel = Channel::new(stream, Duration::from_secs(10)).unwrap();
        assert_eq!(channel.receive().unwrap(), all_messages()[0]);
        writer.join().unwrap();
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok((_, used)) = decode(&bytes) {
                prop_assert!(used <= bytes.len());
            }
        }

        #[test]
        fn valid_header_with_arbitrary_payload_never_panics(
            kind in 0u8..8,
            payload in proptest::collection::vec(any::<u8>(), 0..=MAX_PAYLOAD),
        ) {
            let mut frame = b"HPVB\x01".to_vec();
            frame.push(kind);
            frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            frame.extend_from_slice(&payload);
            if let Ok((message, used)) = decode(&frame) {
                prop_assert_eq!(used, frame.len());
                prop_assert_eq!(decode(&message.encode()), Ok((message.clone(), used)));
            }
        }
    }
}

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

    /// Every message a peer may send; tokens up to twice what a frame carries.
    fn message() -> impl Strategy<Value = Message> {
        let reason = prop::sample::select(
            &[
                RejectReason::BadToken,
                RejectReason::Busy,
                RejectReason::TooLarge,
                RejectReason::Failed,
            ][..],
        );
        prop_oneof![
            (
                vec(any::<u8>(), 0..=2 * MAX_TOKEN),
                endpoint(),
                any::<u32>()
            )
                .prop_map(|(token, endpoint, latency_iterations)| Message::Hello {
                    token,
                    endpoint,
                    latency_iterations,
                }),
            endpoint().prop_map(|endpoint| Message::Accept { endpoint }),
            reason.prop_map(|reason| Message::Reject { reason }),
            Just(Message::Latency),
            Just(Message::Done),
        ]
    }

    /// What a receiver gets for `message`: the token is cut to what a frame carries.
    fn as_sent(message: Message) -> Message {
        match message {
            Message::Hello {
                mut token,
                endpoint,
                latency_iterations,
            } => {
                token.truncate(MAX_TOKEN);
                Message::Hello {
                    token,
                    endpoint,
                    latency_iterations,
                }
            }
            other => other,
        }
    }

    proptest! {
        #[test]
        fn messages_in_a_stream_decode_in_order(messages in vec(message(), 1..6)) {
            let stream: Vec<u8> = messages.iter().flat_map(Message::encode).collect();
            let mut rest = &stream[..];
            for message in messages {
                let (decoded, used) = decode(rest).unwrap();
                prop_assert!(used <= HEADER + MAX_PAYLOAD);
                prop_assert_eq!(decoded, as_sent(message));
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
            tail in bytes(&["HPVB", "\x01"]),
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
