use super::*;

#[test]
fn a_regular_file_is_read_with_the_identity_of_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, "basic_auth_users: {}\n").unwrap();
    let (bytes, read_identity) = read(&path).unwrap();
    assert_eq!(bytes, b"basic_auth_users: {}\n");
    assert_eq!(Some(read_identity), identity(&path));
    // Renamed over: another identity, though size and content are the same.
    let staged = dir.path().join(".web.yml");
    std::fs::write(&staged, "basic_auth_users: {}\n").unwrap();
    std::fs::rename(&staged, &path).unwrap();
    assert_ne!(Some(read_identity), identity(&path));
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    rustix::fs::mkfifoat(rustix::fs::CWD, &path, rustix::fs::Mode::RUSR).unwrap();
    // A blocking open of a FIFO waits for a writer forever; this returns at once.
    let err = read(&path).unwrap_err();
    assert!(matches!(err, ReadError::NotRegular { .. }), "{err}");
}

#[test]
fn directories_devices_and_large_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        read(dir.path()),
        Err(ReadError::NotRegular { .. })
    ));
    assert!(matches!(
        read(Path::new("/dev/zero")),
        Err(ReadError::NotRegular { .. })
    ));
    let large = dir.path().join("large.pem");
    std::fs::write(&large, vec![b'x'; MAX_FILE_BYTES as usize + 1]).unwrap();
    assert!(matches!(read(&large), Err(ReadError::TooLarge { .. })));
}
