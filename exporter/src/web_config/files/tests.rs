use super::*;

#[test]
fn a_regular_file_is_read_with_the_stamp_of_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, "basic_auth_users: {}\n").unwrap();
    let (bytes, stamp) = read(&path).unwrap();
    assert_eq!(bytes, b"basic_auth_users: {}\n");
    assert_eq!(Some(stamp), FileStamp::of_path(&path));
    // Renamed over: another stamp, though size and content are the same.
    let staged = dir.path().join(".web.yml");
    std::fs::write(&staged, "basic_auth_users: {}\n").unwrap();
    std::fs::rename(&staged, &path).unwrap();
    assert_ne!(Some(stamp), FileStamp::of_path(&path));
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    rustix::fs::mkfifoat(rustix::fs::CWD, &path, rustix::fs::Mode::RUSR).unwrap();
    // A blocking open of a FIFO waits for a writer forever; this returns at once.
    let err = read(&path).unwrap_err();
    assert!(matches!(err, SysfsError::NotRegularFile { .. }), "{err}");
}

#[test]
fn directories_devices_and_large_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(read(dir.path()).is_err());
    assert!(matches!(
        read(Path::new("/dev/zero")),
        Err(SysfsError::NotRegularFile { .. })
    ));
    let large = dir.path().join("large.pem");
    std::fs::write(&large, vec![b'x'; MAX_FILE_BYTES + 1]).unwrap();
    assert!(matches!(read(&large), Err(SysfsError::Parse { .. })));
}
