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

/// A peer that proved the token gets the slot, or is told busy after its proof while
/// another session holds it.
#[test]
fn the_slot_goes_to_a_proven_peer_only() {
    let claims = Arc::new(PortClaims::default());
    let target = crate::collectors::verbs::run::test_target();
    let admitted = |claims: Arc<PortClaims>| {
        let target = target.clone();
        move |stream| {
            let mut channel = Channel::new(stream, Duration::from_secs(5))?;
            admit(&mut channel, b"s3cret", &claims, &target).map(|(_, claim)| claim)
        }
    };
    let (client, claim) = handshake(b"s3cret", admitted(claims.clone()));
    // The client waits for an accept, which only a session sends.
    assert!(
        matches!(client, Err(ProbeError::Oob(OobError::Closed))),
        "{client:?}"
    );
    let claim = claim.unwrap();
    assert!(
        claims.claim(&target).is_none(),
        "the session holds the slot"
    );

    let (client, busy) = handshake(b"s3cret", admitted(claims.clone()));
    assert!(
        matches!(client, Err(ProbeError::Rejected(RejectReason::Busy))),
        "{client:?}"
    );
    assert_eq!(busy.unwrap_err().result(), "busy");
    let (client, wrong) = handshake(b"guess", admitted(claims.clone()));
    assert!(
        matches!(client, Err(ProbeError::Rejected(RejectReason::BadToken))),
        "{client:?}"
    );
    assert_eq!(wrong.unwrap_err().result(), "bad_token");
    drop(claim);
    assert!(claims.claim(&target).is_some());
}

/// Loopback connections standing for peers at `addresses` (the list reads them from the
/// argument, not the socket), in order: each handshake's place, and the responder's end.
fn places(handshakes: &Arc<Handshakes>, addresses: &[&str]) -> Vec<(Place, TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    addresses
        .iter()
        .map(|address| {
            let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (responder, _) = listener.accept().unwrap();
            let place = handshakes
                .admit(address.parse().unwrap(), &responder)
                .unwrap();
            (place, client, responder)
        })
        .collect()
}

/// Past [`MAX_HANDSHAKES`], the oldest handshake of the address holding the most is
/// closed: a flood from one address evicts its own, never a peer elsewhere.
#[test]
fn a_full_handshake_list_closes_the_busiest_address_oldest() {
    let handshakes = Arc::new(Handshakes::default());
    let mut addresses = vec!["10.0.0.1", "10.0.0.2"];
    addresses.extend(std::iter::repeat_n("10.0.0.9", 3 * MAX_HANDSHAKES));
    let mut open = places(&handshakes, &addresses);
    assert_eq!(lock(&handshakes.open).len(), MAX_HANDSHAKES);
    let flood = open.split_off(2);
    let (evicted, kept) = flood.split_at(flood.len() - (MAX_HANDSHAKES - 2));
    for (_, _, responder) in evicted {
        // Shut down: a read ends at once.
        assert_eq!((&*responder).read(&mut [0; 1]).unwrap(), 0);
    }
    let mut kept: Vec<_> = kept.iter().map(|(place, ..)| place.id).collect();
    kept.extend(open.iter().map(|(place, ..)| place.id));
    kept.sort_unstable();
    let listed: Vec<_> = lock(&handshakes.open).iter().map(|h| h.id).collect();
    assert_eq!(listed, kept);
    // The peers elsewhere kept their places; a place closed to make room says so.
    for (place, ..) in open {
        assert!(place.leave());
    }
    let (place, ..) = flood.into_iter().next().unwrap();
    assert!(!place.leave());
}

/// Among addresses holding one handshake each, the oldest is closed.
#[test]
fn a_full_list_of_single_addresses_closes_the_oldest() {
    let handshakes = Arc::new(Handshakes::default());
    let addresses: Vec<String> = (0..=MAX_HANDSHAKES)
        .map(|i| format!("10.0.1.{i}"))
        .collect();
    let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let mut open = places(&handshakes, &addresses).into_iter();
    let (oldest, ..) = open.next().unwrap();
    assert!(open.all(|(place, ..)| place.leave()));
    assert!(!oldest.leave());
    assert!(lock(&handshakes.open).is_empty());
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
