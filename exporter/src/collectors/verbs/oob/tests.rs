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
            nonce: [7; NONCE_LEN],
            endpoint: endpoint(),
            latency_iterations: 1000,
        },
        Message::Challenge {
            nonce: [0xc5; NONCE_LEN],
        },
        Message::Proof {
            proof: [0x9a; PROOF_LEN],
        },
        Message::Accept {
            endpoint: endpoint(),
            proof: [1; PROOF_LEN],
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
        decode(b"HPVB\x03\x01\x00\x00"),
        Err(DecodeError::Version(3))
    );
    assert_eq!(
        decode(b"HPVB\x02\x01\xff\xff"),
        Err(DecodeError::Length(65535))
    );
    assert_eq!(decode(b"HPVB\x02\x09\x00\x00"), Err(DecodeError::Kind(9)));
    assert_eq!(
        decode(b"HPVB\x02\x05\x00\x01x"),
        Err(DecodeError::Length(1))
    );
    assert_eq!(
        decode(b"HPVB\x02\x07\x00\x01x"),
        Err(DecodeError::Length(1))
    );
    assert_eq!(
        decode(b"HPVB\x02\x03\x00\x01\x63"),
        Err(DecodeError::Payload("reject"))
    );
}

/// A version 1 hello (what exporters before the handshake send, the token in clear) is a
/// version error naming both versions, read from the header alone.
#[test]
fn a_version_1_hello_is_a_version_error() {
    let mut v1_hello = b"HPVB\x01\x01\x00\x3c".to_vec();
    v1_hello.extend_from_slice(&[0; 0x3c]);
    let err = decode(&v1_hello).unwrap_err();
    assert_eq!(err, DecodeError::Version(1));
    assert_eq!(
        err.to_string(),
        "peer speaks protocol version 1, this exporter version 2"
    );
    assert_eq!(decode(&v1_hello[..HEADER]), Err(DecodeError::Version(1)));
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

/// A deadline bounds every frame together: a peer that answers each message in time but
/// not the exchange gets no longer than the deadline, and nothing is sent past it.
#[test]
fn a_deadline_ends_frames_that_each_come_in_time() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    peer.write_all(&all_messages()[0].encode()).unwrap();
    let mut channel = Channel::new(listener.accept().unwrap().0, Duration::from_secs(10)).unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    channel.set_deadline(Some(deadline));
    assert_eq!(channel.receive().unwrap(), all_messages()[0]);
    assert!(matches!(channel.receive(), Err(OobError::Timeout)));
    let late = Instant::now().saturating_duration_since(deadline);
    assert!(late < Duration::from_secs(2), "{late:?} past the deadline");
    assert!(matches!(
        channel.send(&Message::Latency),
        Err(OobError::Timeout)
    ));
    channel.set_deadline(None);
    channel.send(&Message::Latency).unwrap();
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
        let mut frame = b"HPVB\x02".to_vec();
        frame.push(kind);
        frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        frame.extend_from_slice(&payload);
        if let Ok((message, used)) = decode(&frame) {
            prop_assert_eq!(used, frame.len());
            prop_assert_eq!(decode(&message.encode()), Ok((message.clone(), used)));
        }
    }
}
