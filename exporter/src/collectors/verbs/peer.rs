//! Peer mode: the client side of a probe against another exporter, and the responder that
//! serves one such session at a time to allow-listed peers.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::auth::{self, Transcript};
use super::engine::{self, Endpoint, Measurement, Params, Progress, Side};
use super::ffi::Verbs;
use super::oob::{Channel, DecodeError, Message, OobError, RejectReason};
use super::port;
use super::resources::ProtectionDomain;
use super::{PortClaims, ProbeError, Target};
use crate::collector::{CollectError, ErrorKind, PendingErrors};

/// The largest message a responder accepts to register a buffer for.
pub const MAX_MESSAGE_SIZE: usize = 16 << 20;
/// The most ping-pongs a responder echoes in one session.
const MAX_LATENCY_ITERATIONS: u32 = 100_000;

/// A probe against a responder at `peer`.
pub fn run_peer(
    verbs: &Arc<Verbs>,
    target: &Target,
    peer: &str,
    token: &[u8],
    params: &Params,
    progress: &mut dyn FnMut(Progress),
) -> Result<Measurement, ProbeError> {
    let timeout = params.step_timeout;
    let stream = connect(peer, timeout)?;
    let mut channel = Channel::new(stream, timeout)?;
    let (device, address) = port::open(verbs, target)?;
    let pd = ProtectionDomain::new(&device)?;
    let side = Side::new(&pd, &device, params, engine::initial_psn())?;
    let remote = client_handshake(
        &mut channel,
        token,
        &side.endpoint(&address),
        params.latency_iterations,
    )?;
    if remote.len < side.message_size as u64 {
        return Err(ProbeError::Invalid(
            "peer's buffer is smaller than the message size",
        ));
    }
    side.connect(&address, &remote)?;
    let bandwidth = engine::measure_bandwidth(&side, &remote, params, progress)?;
    side.clear_receive_area();
    channel.send(&Message::Latency)?;
    expect(&mut channel, Message::Latency, "latency acknowledgement")?;
    let latency = engine::measure_latency(&side, &remote, params, &mut |_| Ok(()), progress)?;
    channel.send(&Message::Done)?;
    Ok(Measurement { bandwidth, latency })
}

/// The client's side of the handshake: proves the token, and returns the responder's endpoint
/// once the responder has proved it too (before any write goes to that endpoint).
pub fn client_handshake(
    channel: &mut Channel,
    token: &[u8],
    endpoint: &Endpoint,
    latency_iterations: u32,
) -> Result<Endpoint, ProbeError> {
    let client_nonce = auth::nonce()?;
    channel.send(&Message::Hello {
        nonce: client_nonce,
        endpoint: *endpoint,
        latency_iterations,
    })?;
    let responder_nonce = match channel.receive() {
        Ok(Message::Challenge { nonce }) => nonce,
        Ok(Message::Reject { reason }) => return Err(ProbeError::Rejected(reason)),
        Ok(_) => return Err(OobError::Unexpected("reply to hello").into()),
        // A version 1 responder closes with our hello unread: the kernel resets the connection.
        Err(OobError::Closed) => return Err(ProbeError::HelloUnanswered),
        Err(OobError::Io(err)) if err.kind() == std::io::ErrorKind::ConnectionReset => {
            return Err(ProbeError::HelloUnanswered)
        }
        Err(err) => return Err(err.into()),
    };
    let transcript = Transcript::new(
        &client_nonce,
        &responder_nonce,
        endpoint,
        latency_iterations,
    );
    channel.send(&Message::Proof {
        proof: transcript.client_proof(token),
    })?;
    match channel.receive()? {
        Message::Accept { endpoint, proof }
            if transcript.responder_proved(token, &endpoint, &proof) =>
        {
            Ok(endpoint)
        }
        Message::Accept { .. } => Err(ProbeError::ResponderUnproven),
        Message::Reject { reason } => Err(ProbeError::Rejected(reason)),
        _ => Err(OobError::Unexpected("reply to proof").into()),
    }
}

fn connect(peer: &str, timeout: Duration) -> Result<TcpStream, ProbeError> {
    let unreachable = |why: String| ProbeError::PeerUnreachable(format!("{peer}: {why}"));
    let addresses: Vec<SocketAddr> = peer
        .to_socket_addrs()
        .map_err(|err| unreachable(err.to_string()))?
        .collect();
    let mut last = String::from("no address");
    for address in addresses {
        match TcpStream::connect_timeout(&address, timeout) {
            Ok(stream) => return Ok(stream),
            Err(err) => last = err.to_string(),
        }
    }
    Err(unreachable(last))
}

fn expect(channel: &mut Channel, want: Message, what: &'static str) -> Result<(), OobError> {
    if channel.receive()? == want {
        Ok(())
    } else {
        Err(OobError::Unexpected(what))
    }
}

/// An allowed peer network: an address and a prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `::1/128`, or a bare address (a single host).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().ok()?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        (prefix <= max).then_some(Cidr { network, prefix })
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        let (net, addr, bits) = match (self.network, address) {
            (IpAddr::V4(net), IpAddr::V4(addr)) => {
                (u128::from(net.to_bits()), u128::from(addr.to_bits()), 32)
            }
            (IpAddr::V6(net), IpAddr::V6(addr)) => (net.to_bits(), addr.to_bits(), 128),
            _ => return false,
        };
        let shift = bits - u32::from(self.prefix);
        shift >= bits || (net >> shift) == (addr >> shift)
    }
}

/// What the responder serves and to whom.
#[derive(Debug, Clone)]
pub struct ResponderSettings {
    pub listen: String,
    pub allow: Vec<Cidr>,
    pub token: Option<Vec<u8>>,
    pub target: Target,
    pub step_timeout: Duration,
    /// Shared with the scheduler: a session and a scheduled probe never use one port at once.
    pub claims: Arc<PortClaims>,
}

/// Responder session outcomes, the `result` label of its counter.
pub const SESSION_RESULTS: [&str; 8] = [
    "success",
    "denied",
    "busy",
    "bad_message",
    "bad_token",
    "version_mismatch",
    "timeout",
    "error",
];

/// Sessions by result, and the failures since the last scrape.
#[derive(Default)]
pub struct ResponderStats {
    counts: [AtomicU64; SESSION_RESULTS.len()],
    /// Every failed session but a busy one (a second peer at the same time is normal).
    pub failures: PendingErrors,
}

impl ResponderStats {
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        SESSION_RESULTS
            .iter()
            .zip(&self.counts)
            .map(|(result, count)| (*result, count.load(Ordering::Relaxed)))
    }

    fn record(&self, peer: IpAddr, outcome: Result<(), SessionError>) {
        let result = match &outcome {
            Ok(()) => "success",
            Err(err) => err.result(),
        };
        if let Some(index) = SESSION_RESULTS.iter().position(|r| *r == result) {
            self.counts[index].fetch_add(1, Ordering::Relaxed);
        }
        let Err(err) = outcome else {
            return;
        };
        let kind = match &err {
            SessionError::Busy => return,
            SessionError::Oob(OobError::Timeout) => ErrorKind::Timeout,
            SessionError::Oob(_) | SessionError::Version(_) => ErrorKind::Parse,
            _ => ErrorKind::Io,
        };
        // One cause per peer and fault, so a hostile peer is logged once, not once a session.
        self.failures.push(
            CollectError::new(kind, format!("verbs responder session from {peer}: {err}"))
                .with("peer", peer.to_string())
                .with("result", result),
        );
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("peer not in --probe.verbs.allow")]
    Denied,
    #[error("another session is running")]
    Busy,
    #[error("wrong token (the peer's proof of it did not verify)")]
    BadToken,
    #[error("{}", DecodeError::Version(*.0))]
    Version(u8),
    #[error(transparent)]
    Random(#[from] auth::RandomError),
    #[error(transparent)]
    Oob(#[from] OobError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
}

impl SessionError {
    fn result(&self) -> &'static str {
        match self {
            SessionError::Denied => "denied",
            SessionError::Busy => "busy",
            SessionError::BadToken => "bad_token",
            SessionError::Version(_) => "version_mismatch",
            SessionError::Oob(OobError::Timeout) => "timeout",
            SessionError::Oob(OobError::Decode(_) | OobError::Unexpected(_) | OobError::Closed) => {
                "bad_message"
            }
            SessionError::Probe(ProbeError::Timeout(_)) => "timeout",
            SessionError::Oob(OobError::Io(_))
            | SessionError::Probe(_)
            | SessionError::Random(_) => "error",
        }
    }
}

/// Binds the responder's socket (so that a taken port fails at start-up).
pub fn bind(settings: &ResponderSettings) -> std::io::Result<TcpListener> {
    TcpListener::bind(&settings.listen)
}

/// Accepts connections until `stopped` (the listener is shut down to wake it): one session at
/// a time, each on its own thread so that the listener can turn others away at once.
pub fn serve(
    listener: TcpListener,
    verbs: Arc<Verbs>,
    settings: Arc<ResponderSettings>,
    stats: Arc<ResponderStats>,
    stopped: &dyn Fn() -> bool,
) {
    let busy = Arc::new(AtomicBool::new(false));
    for stream in listener.incoming() {
        if stopped() {
            return;
        }
        let Ok(stream) = stream else {
            // Out of file descriptors (or memory) fails every accept at once: without a pause
            // the listener would spin a core until the process has some again.
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let Ok(peer) = stream.peer_addr().map(|a| a.ip()) else {
            continue;
        };
        if !settings.allow.iter().any(|cidr| cidr.contains(peer)) {
            drop(stream);
            stats.record(peer, Err(SessionError::Denied));
            continue;
        }
        let claim = match busy.swap(true, Ordering::AcqRel) {
            false => settings.claims.claim(&settings.target).or_else(|| {
                // A scheduled probe uses the port now.
                busy.store(false, Ordering::Release);
                None
            }),
            true => None,
        };
        let Some(claim) = claim else {
            if let Ok(mut channel) = Channel::new(stream, settings.step_timeout) {
                let _ = channel.send(&Message::Reject {
                    reason: RejectReason::Busy,
                });
            }
            stats.record(peer, Err(SessionError::Busy));
            continue;
        };
        let (verbs, settings, stats, session_busy) =
            (verbs.clone(), settings.clone(), stats.clone(), busy.clone());
        let spawned = std::thread::Builder::new()
            .name("hpcnode-verbs-responder".into())
            .spawn(move || {
                // A bug in one session must not leave the responder busy for good: it is
                // counted as that session's error, as the scheduler counts a run's.
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    session(stream, &verbs, &settings)
                }))
                .unwrap_or(Err(SessionError::Probe(ProbeError::Panicked)));
                drop(claim);
                session_busy.store(false, Ordering::Release);
                stats.record(peer, outcome);
            });
        if spawned.is_err() {
            busy.store(false, Ordering::Release);
        }
    }
}

/// One session; every resource it creates is released when it returns, however it ends.
fn session(
    stream: TcpStream,
    verbs: &Arc<Verbs>,
    settings: &ResponderSettings,
) -> Result<(), SessionError> {
    let mut channel = Channel::new(stream, settings.step_timeout)?;
    let token = settings.token.as_deref().unwrap_or_default();
    let verified = responder_handshake(&mut channel, token)?;
    let (remote, latency_iterations) = (verified.client, verified.latency_iterations);
    let message_size = usize::try_from(remote.len).unwrap_or(usize::MAX);
    if message_size > MAX_MESSAGE_SIZE {
        channel.send(&Message::Reject {
            reason: RejectReason::TooLarge,
        })?;
        return Err(OobError::Unexpected("message size above the limit").into());
    }
    let params = Params {
        message_size,
        queue_depth: 1,
        latency_iterations: latency_iterations.min(MAX_LATENCY_ITERATIONS),
        step_timeout: settings.step_timeout,
        ..Params::default()
    };
    let side = match responder_side(verbs, &settings.target, &params, &remote) {
        Ok(side) => side,
        Err(err) => {
            let _ = channel.send(&Message::Reject {
                reason: RejectReason::Failed,
            });
            return Err(err.into());
        }
    };
    channel.send(&Message::Accept {
        endpoint: side.endpoint,
        proof: verified.transcript.responder_proof(token, &side.endpoint),
    })?;
    // The client writes for its bandwidth run now; the next message starts the ping-pong.
    let bandwidth_window = channel_timeout_for_bandwidth(settings.step_timeout);
    channel.set_timeout(bandwidth_window)?;
    if channel.receive()? != Message::Latency {
        return Err(OobError::Unexpected("message after accept").into());
    }
    channel.set_timeout(settings.step_timeout)?;
    side.side.clear_receive_area();
    channel.send(&Message::Latency)?;
    // Each echo waits at most a step, and all of them at most as long as a bandwidth run: a
    // peer writing just before every step timeout would otherwise hold the responder for
    // 100 000 of them.
    let ping_pong_end = Instant::now() + channel_timeout_for_bandwidth(settings.step_timeout);
    for i in 0..params.latency_iterations.max(1) {
        let left = ping_pong_end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ProbeError::Timeout("the ping-pong (longer than a bandwidth run)").into());
        }
        side.side
            .echo(&remote, engine::marker(i), left.min(settings.step_timeout))?;
    }
    match channel.receive()? {
        Message::Done => Ok(()),
        _ => Err(OobError::Unexpected("message after ping-pong").into()),
    }
}

/// A client that proved the token, with what it asked for.
pub struct Verified {
    pub client: Endpoint,
    pub latency_iterations: u32,
    pub transcript: Transcript,
}

/// The responder's side of the handshake up to the client's proof, checked before the
/// responder creates any verbs object. A peer of another protocol version is told so.
pub fn responder_handshake(channel: &mut Channel, token: &[u8]) -> Result<Verified, SessionError> {
    let (client_nonce, client, latency_iterations) = match channel.receive() {
        Ok(Message::Hello {
            nonce,
            endpoint,
            latency_iterations,
        }) => (nonce, endpoint, latency_iterations),
        Ok(_) => return Err(OobError::Unexpected("first message (not hello)").into()),
        Err(OobError::Decode(DecodeError::Version(version))) => {
            let _ = channel.send(&Message::Reject {
                reason: RejectReason::Version,
            });
            return Err(SessionError::Version(version));
        }
        Err(err) => return Err(err.into()),
    };
    let responder_nonce = auth::nonce()?;
    channel.send(&Message::Challenge {
        nonce: responder_nonce,
    })?;
    let Message::Proof { proof } = channel.receive()? else {
        return Err(OobError::Unexpected("reply to challenge (not proof)").into());
    };
    let transcript = Transcript::new(&client_nonce, &responder_nonce, &client, latency_iterations);
    if !transcript.client_proved(token, &proof) {
        let _ = channel.send(&Message::Reject {
            reason: RejectReason::BadToken,
        });
        return Err(SessionError::BadToken);
    }
    Ok(Verified {
        client,
        latency_iterations,
        transcript,
    })
}

/// How long the responder waits for the client's bandwidth run to finish: the longest run the
/// client may configure, plus its drain. The ping-pong gets as long in all.
fn channel_timeout_for_bandwidth(step_timeout: Duration) -> Duration {
    super::MAX_DURATION + step_timeout
}

/// The responder's connected side, with the endpoint it announces.
struct ResponderSide {
    side: Side,
    endpoint: Endpoint,
}

fn responder_side(
    verbs: &Arc<Verbs>,
    target: &Target,
    params: &Params,
    remote: &Endpoint,
) -> Result<ResponderSide, ProbeError> {
    let (device, address) = port::open(verbs, target)?;
    let pd = ProtectionDomain::new(&device)?;
    let side = Side::new(&pd, &device, params, engine::initial_psn())?;
    side.connect(&address, remote)?;
    let endpoint = side.endpoint(&address);
    Ok(ResponderSide { side, endpoint })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::verbs::engine::test_endpoint as endpoint;
    use std::io::{Read, Write};

    /// Runs `responder` on one end of a loopback TCP connection and the client's handshake
    /// with `token` on the other; the client's result and the responder's.
    fn handshake<T: Send + 'static>(
        token: &'static [u8],
        responder: impl FnOnce(TcpStream) -> T + Send + 'static,
    ) -> (Result<Endpoint, ProbeError>, T) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let served = std::thread::spawn(move || responder(listener.accept().unwrap().0));
        let stream = TcpStream::connect(address).unwrap();
        let mut channel = Channel::new(stream, Duration::from_secs(5)).unwrap();
        let client = client_handshake(&mut channel, token, &endpoint(1), 10);
        drop(channel);
        (client, served.join().unwrap())
    }

    /// Our responder's handshake with `token`, accepting with endpoint 2 when the client proved.
    fn responder(token: &'static [u8]) -> impl FnOnce(TcpStream) -> Result<u32, SessionError> {
        move |stream| {
            let mut channel = Channel::new(stream, Duration::from_secs(5))?;
            let verified = responder_handshake(&mut channel, token)?;
            channel.send(&Message::Accept {
                endpoint: endpoint(2),
                proof: verified.transcript.responder_proof(token, &endpoint(2)),
            })?;
            Ok(verified.client.qp_num)
        }
    }

    #[test]
    fn both_sides_prove_the_same_token() {
        let (client, served) = handshake(b"s3cret", responder(b"s3cret"));
        assert_eq!(client.unwrap(), endpoint(2));
        assert_eq!(served.unwrap(), 1);
        // Neither side with a token is the empty token on both.
        let (client, served) = handshake(b"", responder(b""));
        assert_eq!(client.unwrap(), endpoint(2));
        assert!(served.is_ok());
    }

    #[test]
    fn a_wrong_token_is_rejected_before_anything_is_set_up() {
        for (client_token, responder_token) in [
            (&b"guess"[..], &b"s3cret"[..]),
            (b"", b"s3cret"),
            (b"s3cret", b""),
        ] {
            let (client, served) = handshake(client_token, responder(responder_token));
            assert!(
                matches!(client, Err(ProbeError::Rejected(RejectReason::BadToken))),
                "{client:?}"
            );
            assert_eq!(served.unwrap_err().result(), "bad_token");
        }
    }

    /// A responder that does not hold the token (it answers with another key's proof) is
    /// refused by the client before its endpoint is used.
    #[test]
    fn a_responder_without_the_token_is_refused() {
        let (client, _) = handshake(b"s3cret", |stream| {
            let mut channel = Channel::new(stream, Duration::from_secs(5)).unwrap();
            let Ok(Message::Hello {
                nonce,
                endpoint: client,
                latency_iterations,
            }) = channel.receive()
            else {
                panic!("no hello");
            };
            let challenge = [3; crate::collectors::verbs::oob::NONCE_LEN];
            channel
                .send(&Message::Challenge { nonce: challenge })
                .unwrap();
            let _ = channel.receive();
            let transcript = Transcript::new(&nonce, &challenge, &client, latency_iterations);
            channel
                .send(&Message::Accept {
                    endpoint: endpoint(2),
                    proof: transcript.responder_proof(b"guess", &endpoint(2)),
                })
                .unwrap();
        });
        let err = client.unwrap_err();
        assert!(matches!(err, ProbeError::ResponderUnproven), "{err}");
        assert_eq!(err.result(), "rejected");
    }

    /// A version 1 responder reads the header, finds version 2 and closes without a word.
    #[test]
    fn a_version_1_responder_is_named_in_the_error() {
        let (client, _) = handshake(b"s3cret", |mut stream| {
            let mut header = [0u8; 8];
            stream.read_exact(&mut header).unwrap();
            assert_eq!(&header[..5], b"HPVB\x02");
        });
        let err = client.unwrap_err();
        assert!(matches!(err, ProbeError::HelloUnanswered), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("version 2 hello") && text.contains("version 1"),
            "{text}"
        );
    }

    /// A responder of a later version answers in its own; the client names both versions.
    #[test]
    fn a_reply_in_another_version_is_a_version_mismatch() {
        let (client, _) = handshake(b"s3cret", |mut stream| {
            let _ = stream.write_all(b"HPVB\x03\x03\x00\x01\x05");
        });
        let err = client.unwrap_err();
        assert_eq!(err.result(), "version_mismatch");
        assert!(
            err.to_string()
                .contains("peer speaks protocol version 3, this exporter version 2"),
            "{err}"
        );
    }

    #[test]
    fn cidrs() {
        let lan = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(lan.contains("10.1.200.3".parse().unwrap()));
        assert!(!lan.contains("10.2.0.1".parse().unwrap()));
        assert!(lan.contains("::ffff:10.1.0.9".parse().unwrap()));
        let host = Cidr::parse("127.0.0.1").unwrap();
        assert!(host.contains("127.0.0.1".parse().unwrap()));
        assert!(!host.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("192.0.2.1".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        for bad in ["10.0.0.0/33", "10.0.0/8", "x", "::/129", "10.0.0.0/-1", ""] {
            assert!(Cidr::parse(bad).is_none(), "{bad}");
        }
    }
}
