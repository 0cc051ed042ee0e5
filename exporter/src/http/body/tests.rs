use tokio::net::TcpListener;

use super::*;

/// Writes 64 KiB chunks to `stream` until a write fails or `within` passes.
async fn write_until_error(
    stream: &mut StallLimit<tokio::net::TcpStream>,
    within: Duration,
) -> Option<std::io::Error> {
    let chunk = vec![0u8; 64 * 1024];
    let give_up = tokio::time::Instant::now() + within;
    loop {
        let write = std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_write(cx, &chunk));
        match tokio::time::timeout_at(give_up, write).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => return Some(err),
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_times_out_one_that_reads_does_not() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();

    // Never reads: the kernel's buffers fill, then the write stalls past the limit.
    let _silent = tokio::net::TcpStream::connect(address).await.unwrap();
    let (server_side, _) = listener.accept().await.unwrap();
    let mut stream = StallLimit::new(server_side, Duration::from_millis(200));
    let err = write_until_error(&mut stream, Duration::from_secs(20))
        .await
        .expect("a stalled write never failed");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);

    // Reads steadily, if slowly: writes keep making progress and never time out.
    let reader = std::net::TcpStream::connect(address).unwrap();
    let (server_side, _) = listener.accept().await.unwrap();
    let reading = std::thread::spawn(move || {
        use std::io::Read as _;
        let mut reader = reader;
        let mut buf = vec![0u8; 256 * 1024];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    // A limit far above the reader's pace: on a loaded machine its thread can be off the
    // CPU for a few hundred milliseconds without having stopped reading.
    let mut stream = StallLimit::new(server_side, Duration::from_secs(5));
    let err = write_until_error(&mut stream, Duration::from_secs(1)).await;
    assert!(err.is_none(), "{err:?}");
    drop(stream);
    reading.join().unwrap();
}
