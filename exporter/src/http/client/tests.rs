use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;

use super::*;

/// A server on a loopback port that answers one connection with `answer` (raw bytes, `None`:
/// it reads the request and never answers); the request it read comes back on the channel.
fn serve_once(answer: Option<Vec<u8>>) -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sent, received) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let _ = sent.send(String::from_utf8_lossy(&head).into_owned());
        match answer {
            Some(answer) => {
                let _ = stream.write_all(&answer);
            }
            // Held open, unanswered, until the client gives up.
            None => std::thread::sleep(Duration::from_secs(5)),
        }
    });
    (port, received)
}

fn get_from(
    port: u16,
    basic_auth: Option<(&str, &str)>,
    timeout: Duration,
) -> Result<Bytes, ClientError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let get = Get {
        host: "127.0.0.1",
        port,
        target: "/metrics?collect[]=rdma",
        tls: None,
        basic_auth,
        max_body: 64,
    };
    runtime.block_on(super::get(get, timeout))
}

fn answer(status: &str, body: &str) -> Option<Vec<u8>> {
    Some(format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: text/plain; version=0.0.4\r\n\r\n{body}", body.len()).into_bytes())
}

#[test]
fn a_200_answer_is_its_body_and_the_request_asks_for_text_with_credentials() {
    let (port, request) = serve_once(answer("200 OK", "up 1\n"));
    let body = get_from(
        port,
        Some(("prometheus", "s3cret:x")),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(&body[..], b"up 1\n");
    let request = request.recv().unwrap();
    assert!(
        request.starts_with("GET /metrics?collect[]=rdma HTTP/1.1\r\n"),
        "{request}"
    );
    let lower = request.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("host: 127.0.0.1:{port}\r\n")),
        "{request}"
    );
    assert!(
        lower.contains("accept: text/plain;version=0.0.4\r\n"),
        "{request}"
    );
    assert!(!lower.contains("accept-encoding"), "{request}");
    let authorization = request
        .lines()
        .find_map(|line| {
            line.split_once(':')
                .filter(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        })
        .map(|(_, value)| value.trim());
    // base64("prometheus:s3cret:x")
    assert_eq!(authorization, Some("Basic cHJvbWV0aGV1czpzM2NyZXQ6eA=="));
}

#[test]
fn no_credentials_no_authorization_header() {
    let (port, request) = serve_once(answer("200 OK", ""));
    get_from(port, None, Duration::from_secs(10)).unwrap();
    assert!(!request
        .recv()
        .unwrap()
        .to_ascii_lowercase()
        .contains("authorization"));
}

#[test]
fn anything_but_200_is_an_error_and_no_redirect_is_followed() {
    for status in ["401 Unauthorized", "302 Found", "503 Service Unavailable"] {
        let (port, _) = serve_once(answer(status, "no"));
        let err = get_from(port, None, Duration::from_secs(10)).unwrap_err();
        assert_eq!(err.to_string(), format!("HTTP status {status}"));
    }
}

#[test]
fn a_body_beyond_the_limit_is_refused_not_cut() {
    let (port, _) = serve_once(answer("200 OK", &"x".repeat(65)));
    let err = get_from(port, None, Duration::from_secs(10)).unwrap_err();
    assert!(matches!(err, ClientError::TooLarge(64)), "{err}");
}

#[test]
fn a_server_that_never_answers_is_a_timeout() {
    let (port, _) = serve_once(None);
    let started = std::time::Instant::now();
    let err = get_from(port, None, Duration::from_millis(300)).unwrap_err();
    assert!(matches!(err, ClientError::Timeout(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_port_nobody_listens_on_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = get_from(port, None, Duration::from_secs(10)).unwrap_err();
    assert!(matches!(err, ClientError::Connect(_)), "{err}");
}

#[test]
fn not_http_is_an_error() {
    let (port, _) = serve_once(Some(b"SSH-2.0-OpenSSH_9.2\r\n".to_vec()));
    let err = get_from(port, None, Duration::from_secs(10)).unwrap_err();
    assert!(matches!(err, ClientError::Http(_)), "{err}");
}
