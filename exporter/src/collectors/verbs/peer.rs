//! Peer mode: the client side of a probe against another exporter, and the responder that
//! serves one such session at a time to allow-listed peers.

use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::auth::{self, Transcript};
use super::engine::{self, Endpoint, Measurement, Params, Progress, Side};
use super::ffi::Verbs;
use super::oob::{Channel, DecodeError, Message, OobError, RejectReason};
use super::port;
use super::resources::ProtectionDomain;
use super::{PortClaim, PortClaims, ProbeError, Target};
use crate::collector::{CollectError, ErrorKind, PendingErrors};
use crate::sync::lock;

/// The largest message a responder accepts to register a buffer for.
pub const MAX_MESSAGE_SIZE: usize = 16 << 20;
/// The most ping-pongs a responder echoes in one session.
const MAX_LATENCY_ITERATIONS: u32 = 100_000;
/// The most connections in their handshake at once: past it, one is closed unfinished to make
/// room for the newest ([`Handshakes::admit`]).
pub const MAX_HANDSHAKES: usize = 16;
/// How long a connection has from its accept to prove the token (or `--collector.verbs.timeout`, if
/// shorter); until it has, it holds nothing but its place among the handshakes.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(2);

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
            SessionError::Oob(OobError::Timeout) | SessionError::Crowded => ErrorKind::Timeout,
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
    #[error("peer not in --collector.verbs.allow")]
    Denied,
    #[error("another session is running")]
    Busy,
    #[error("closed before it proved the token, to make room: {MAX_HANDSHAKES} connections were in their handshake")]
    Crowded,
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
            SessionError::Crowded => "timeout",
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

/// Accepts connections until `stopped` (the listener is shut down to wake it), each on its own
/// thread: the handshake first, under [`HANDSHAKE_DEADLINE`], and only for a peer that proved
/// the token the session slot (the port's claim), one session at a time.
pub fn serve(
    listener: TcpListener,
    verbs: Arc<Verbs>,
    settings: Arc<ResponderSettings>,
    stats: Arc<ResponderStats>,
    stopped: &dyn Fn() -> bool,
) {
    let handshakes = Arc::new(Handshakes::default());
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
        let accepted = Instant::now();
        let Ok(peer) = stream.peer_addr().map(|a| a.ip()) else {
            continue;
        };
        if !settings.allow.iter().any(|cidr| cidr.contains(peer)) {
            drop(stream);
            stats.record(peer, Err(SessionError::Denied));
            continue;
        }
        let Ok(place) = handshakes.admit(peer, &stream) else {
            continue;
        };
        let (verbs, settings, stats) = (verbs.clone(), settings.clone(), stats.clone());
        // Without a thread the connection (and its place) is dropped with the closure.
        let _ = std::thread::Builder::new()
            .name("hpcnode-verbs-responder".into())
            .spawn(move || {
                // A bug in one session must not take the responder down: it is counted as that
                // session's error, as the scheduler counts a run's.
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    connection(stream, place, accepted, &verbs, &settings)
                }))
                .unwrap_or(Err(SessionError::Probe(ProbeError::Panicked)));
                stats.record(peer, outcome);
            });
    }
}

/// The connections in their handshake.
#[derive(Default)]
struct Handshakes {
    next_id: AtomicU64,
    /// Oldest first, each with a handle to close it by.
    open: Mutex<Vec<Handshake>>,
}

struct Handshake {
    id: u64,
    peer: IpAddr,
    stream: TcpStream,
}

/// A connection's place among the handshakes, given up when dropped.
struct Place {
    handshakes: Arc<Handshakes>,
    id: u64,
}

impl Handshakes {
    /// Gives `stream` a place. When all are taken, the oldest handshake of the address holding
    /// the most is closed: connections that never prove the token keep neither a peer at
    /// another address out, nor (each in turn) one that comes after them.
    fn admit(self: &Arc<Self>, peer: IpAddr, stream: &TcpStream) -> std::io::Result<Place> {
        let stream = stream.try_clone()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut open = lock(&self.open);
        if open.len() >= MAX_HANDSHAKES {
            let held = |peer| open.iter().filter(|h| h.peer == peer).count();
            let most = open.iter().map(|h| held(h.peer)).max().unwrap_or(0);
            if let Some(oldest) = open.iter().position(|h| held(h.peer) == most) {
                // Its thread's read or write fails at once, and it finds its place gone.
                let _ = open.remove(oldest).stream.shutdown(Shutdown::Both);
            }
        }
        open.push(Handshake { id, peer, stream });
        Ok(Place {
            handshakes: self.clone(),
            id,
        })
    }

    /// Removes the handshake `id`; whether it was still there (not closed to make room).
    fn remove(&self, id: u64) -> bool {
        let mut open = lock(&self.open);
        let index = open.iter().position(|h| h.id == id);
        index.map(|index| open.remove(index)).is_some()
    }
}

impl Place {
    /// Leaves the handshakes; whether the connection still had its place.
    fn leave(self) -> bool {
        self.handshakes.remove(self.id)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.handshakes.remove(self.id);
    }
}

/// One connection: the handshake by its deadline, then the session for a peer that proved the
/// token and found the port free.
fn connection(
    stream: TcpStream,
    place: Place,
    accepted: Instant,
    verbs: &Arc<Verbs>,
    settings: &ResponderSettings,
) -> Result<(), SessionError> {
    let mut channel = Channel::new(stream, settings.step_timeout)?;
    channel.set_deadline(Some(
        accepted + HANDSHAKE_DEADLINE.min(settings.step_timeout),
    ));
    let token = settings.token.as_deref().unwrap_or_default();
    let admitted = admit(&mut channel, token, &settings.claims, &settings.target);
    if !place.leave() {
        return Err(SessionError::Crowded);
    }
    let (verified, _claim) = admitted?;
    channel.set_deadline(None);
    session(channel, verified, verbs, settings)
}

/// The handshake, then the session slot (the port, which a scheduled probe may hold): a peer
/// that proved the token gets the slot, or is told busy; one that did not gets nothing.
pub(crate) fn admit(
    channel: &mut Channel,
    token: &[u8],
    claims: &Arc<PortClaims>,
    target: &Target,
) -> Result<(Verified, PortClaim), SessionError> {
    let verified = responder_handshake(channel, token)?;
    let Some(claim) = claims.claim(target) else {
        let _ = channel.send(&Message::Reject {
            reason: RejectReason::Busy,
        });
        return Err(SessionError::Busy);
    };
    Ok((verified, claim))
}

/// One session of a peer that proved the token; every resource it creates is released when it
/// returns, however it ends.
fn session(
    mut channel: Channel,
    verified: Verified,
    verbs: &Arc<Verbs>,
    settings: &ResponderSettings,
) -> Result<(), SessionError> {
    let token = settings.token.as_deref().unwrap_or_default();
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
mod tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::collectors::verbs::engine::test_endpoint;
    use crate::collectors::verbs::oob::{NONCE_LEN, PROOF_LEN};
    use crate::test_strategies::bytes;
    use proptest::prelude::*;

    /// What a peer may send: anything, or a well-formed hello then anything, or a hello and a
    /// proof (which cannot be right: it was made before the responder's nonce) then anything.
    fn peer_bytes() -> impl Strategy<Value = Vec<u8>> {
        let hello = (any::<[u8; NONCE_LEN]>(), any::<u32>()).prop_map(|(nonce, iterations)| {
            Message::Hello {
                nonce,
                endpoint: test_endpoint(1),
                latency_iterations: iterations,
            }
            .encode()
        });
        let proof = any::<[u8; PROOF_LEN]>().prop_map(|proof| Message::Proof { proof }.encode());
        let rest = || bytes(&["HPVB", "\x02", "\x07\x00\x20", "\x01\x00\x53"]);
        prop_oneof![
            rest(),
            (hello.clone(), rest()).prop_map(|(hello, rest)| [hello, rest].concat()),
            (hello, proof, rest()).prop_map(|(hello, proof, rest)| [hello, proof, rest].concat()),
        ]
    }

    proptest! {
        /// The responder's handshake over real TCP, with the slot free and taken: an error,
        /// never the slot, never busy (the fuzz target's check, on these inputs).
        #[test]
        fn no_bytes_get_the_slot_without_the_token(input in peer_bytes()) {
            crate::fuzzing::verbs_handshake(&input);
        }
    }
}
