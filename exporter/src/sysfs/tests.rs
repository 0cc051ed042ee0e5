use super::*;
use std::ffi::{CString, OsStr};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use super::resolve::tests::hostile_tree;
use crate::error::{CollectError, ErrorKind};

pub(super) fn mkfifo(path: &Path) {
    let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
}

/// Sets a directory's modification time an hour back: settled, as a fixture tree is by
/// the time it is scraped.
pub(crate) fn settle(dir: &Path) {
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    fs::File::open(dir)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
}

pub(super) fn dir_with(files: &[(&str, &str)]) -> (tempfile::TempDir, SysDir) {
    let tmp = tempfile::tempdir().unwrap();
    for (name, content) in files {
        fs::write(tmp.path().join(name), content).unwrap();
    }
    let dir = SysDir::open(tmp.path(), "").unwrap();
    (tmp, dir)
}

#[test]
fn trims_trailing_newline_and_blank_lines() {
    let (_tmp, dir) = dir_with(&[("link_layer", "InfiniBand\n\n")]);
    let mut reader = AttributeReader::default();
    assert_eq!(dir.read("link_layer", &mut reader).unwrap(), "InfiniBand");
}

#[test]
fn empty_regular_file_is_empty_text() {
    let (_tmp, dir) = dir_with(&[("0", "")]);
    assert_eq!(dir.read("0", &mut AttributeReader::default()).unwrap(), "");
}

#[test]
fn fifo_is_refused_without_blocking() {
    let (tmp, dir) = dir_with(&[]);
    mkfifo(&tmp.path().join("port_xmit_data"));
    let started = Instant::now();
    let err = dir
        .read("port_xmit_data", &mut AttributeReader::default())
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    // Read at an offset beyond the held budget (opened for the read): refused alike.
    let budget: &'static HeldBudget = Box::leak(Box::new(HeldBudget::new(0)));
    let mut held = HeldAttributes::with_budget(budget);
    let mut reader = AttributeReader::default();
    let err = dir
        .read_held_at("port_xmit_data", 4, 2, &mut held, &mut reader)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
}

#[test]
fn fifo_with_a_silent_writer_is_refused_without_blocking() {
    let (tmp, dir) = dir_with(&[]);
    let path = tmp.path().join("rate");
    mkfifo(&path);
    let _writer = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let err = dir
        .read("rate", &mut AttributeReader::default())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
}

#[test]
fn directory_is_not_an_attribute() {
    let (tmp, dir) = dir_with(&[]);
    fs::create_dir(tmp.path().join("port_xmit_discards")).unwrap();
    let err = dir
        .read("port_xmit_discards", &mut AttributeReader::default())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
}

#[test]
fn longer_than_a_page_is_refused() {
    let long = "1".repeat(MAX_ATTRIBUTE_BYTES + 10);
    let (_tmp, dir) = dir_with(&[("big", &long)]);
    let err = dir
        .read("big", &mut AttributeReader::default())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
}

#[test]
fn text_file_spanning_pages_is_read_whole_within_its_bound() {
    let line = "mlx5_core 2134016 1 mlx5_ib, Live 0xffffffffc0a3e000 (OE)\n";
    let long = line.repeat(500);
    let (_tmp, dir) = dir_with(&[("modules", &long)]);
    assert_eq!(dir.read_text_file("modules", long.len()).unwrap(), long);
    let err = dir.read_text_file("modules", long.len() - 1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
}

/// A real procfs seq file hands out at most a buffer per read(): the loop must read on.
#[test]
fn procfs_seq_file_longer_than_a_page_is_read_whole() {
    let proc = SysDir::open(Path::new("/proc"), "").unwrap();
    let text = proc.read_text_file("crypto", 1 << 20).unwrap();
    assert!(
        text.len() > MAX_ATTRIBUTE_BYTES,
        "/proc/crypto is {} bytes on this kernel; the test needs a multi-page seq file",
        text.len()
    );
    assert_eq!(text, fs::read_to_string("/proc/crypto").unwrap());
}

#[test]
fn text_file_from_a_fifo_is_refused_without_blocking() {
    let (tmp, dir) = dir_with(&[]);
    mkfifo(&tmp.path().join("modules"));
    let err = dir.read_text_file("modules", 1 << 20).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
}

/// A device that never reaches end of file (`zero` under a root that holds devices): the
/// readers that read to end of file refuse it before reading (a 1 GiB bound would not save
/// the scrape); the one-read attribute readers stop at a page.
#[test]
fn endless_device_is_never_read_to_its_end() {
    let dir = SysDir::open(Path::new("/dev"), "").unwrap();
    let started = Instant::now();
    for err in [
        dir.read_text_file("zero", 1 << 30).unwrap_err(),
        dir.read_file("zero", 1 << 30).unwrap_err(),
        read_named_file(Path::new("/dev/zero"), 1 << 30).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    }
    let mut reader = AttributeReader::default();
    for err in [
        dir.read_bytes("zero", &mut reader).unwrap_err(),
        dir.read("zero", &mut reader).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn binary_attribute_keeps_every_byte() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("SecureBoot"), [6, 0, 0, 0, 1]).unwrap();
    let dir = SysDir::open(tmp.path(), "").unwrap();
    let mut reader = AttributeReader::default();
    assert_eq!(
        dir.read_bytes("SecureBoot", &mut reader).unwrap(),
        [6, 0, 0, 0, 1]
    );
}

#[test]
fn garbage_integer_is_a_parse_error_naming_the_file() {
    let (_tmp, dir) = dir_with(&[("symbol_error", "-x\n")]);
    let err = dir
        .read_u64("symbol_error", &mut AttributeReader::default())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Parse);
    assert!(err.to_string().contains("symbol_error"), "{err}");
}

/// A parse error says which file, why and how many bytes, never what the file holds:
/// whatever reader met it (a page, a held descriptor, a whole file, a named file).
#[test]
fn parse_errors_name_the_file_never_its_content() {
    let marker = "MARKER-7f3a";
    let page = format!("{marker} {}", "x".repeat(MAX_ATTRIBUTE_BYTES));
    let (tmp, dir) = dir_with(&[("text", &format!("{marker} !?\n")), ("page", &page)]);
    fs::write(
        tmp.path().join("binary"),
        [marker.as_bytes(), b"\xff\xfe"].concat(),
    )
    .unwrap();
    let mut reader = AttributeReader::default();
    let mut held = HeldAttributes::default();
    let errors = [
        dir.read_u64("text", &mut reader).unwrap_err(),
        dir.read_held_u64("text", &mut held, &mut reader)
            .unwrap_err(),
        dir.read("page", &mut reader).unwrap_err(),
        dir.read("binary", &mut reader).unwrap_err(),
        dir.read_text_file("binary", 1 << 10).unwrap_err(),
        dir.read_file("page", 64).unwrap_err(),
        read_named_file(&tmp.path().join("page"), 64).unwrap_err(),
        SysfsError::parse(&dir.path("text"), "a reason", marker),
    ];
    for err in errors {
        let shown = err.to_string();
        assert_eq!(err.kind(), ErrorKind::Parse, "{shown}");
        assert!(shown.contains(tmp.path().to_str().unwrap()), "{shown}");
        assert!(!shown.contains("MARKER"), "{shown}");
        let logged = CollectError::from(err);
        assert!(!logged.cause.contains("MARKER") && !logged.key().contains("MARKER"));
    }
}

#[test]
fn missing_file_is_not_found() {
    let (_tmp, dir) = dir_with(&[]);
    let err = dir
        .read("hca_type", &mut AttributeReader::default())
        .unwrap_err();
    assert!(err.is_not_found());
}

#[test]
fn bytes_are_read_whole_up_to_the_limit() {
    let config: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("config"), &config).unwrap();
    let dir = SysDir::open(tmp.path(), "").unwrap();
    assert_eq!(dir.read_file("config", 4096).unwrap(), config);
    let err = dir.read_file("config", 4095).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
    mkfifo(&tmp.path().join("fifo"));
    let err = dir.read_file("fifo", 4096).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
}

#[test]
fn entries_sort_numerically_and_links_name_their_target() {
    let (tmp, dir) = dir_with(&[]);
    for name in ["10", "2", "1"] {
        fs::create_dir(tmp.path().join(name)).unwrap();
    }
    std::os::unix::fs::symlink("../../../0000:05:00.0", tmp.path().join("device")).unwrap();
    let names = ["1", "2", "10", "device"].map(|name| Entry::Name(name.to_string()));
    assert_eq!(dir.entries().unwrap(), names);
    assert_eq!(dir.link_target_name("device").unwrap(), "0000:05:00.0");
    assert_eq!(
        dir.link_target("device").unwrap(),
        Path::new("../../../0000:05:00.0")
    );
}

/// A listing longer than one read's buffer is read whole, fresh or again from its start; a
/// directory removed lists nothing, as readdir has it.
#[test]
fn a_long_listing_is_read_whole_and_a_removed_directory_lists_nothing() {
    let (tmp, dir) = dir_with(&[]);
    // About 200 KiB of entries: a dozen reads of the buffer.
    let names: Vec<String> = (0..800)
        .map(|n| format!("{n}{}", "x".repeat(240)))
        .collect();
    for name in &names {
        fs::write(tmp.path().join(name), "").unwrap();
    }
    let listed = |entries: Vec<Entry>| -> Vec<String> {
        entries
            .into_iter()
            .map(|e| e.into_name().unwrap())
            .collect()
    };
    let mut expected = names.clone();
    expected.sort();
    let mut fresh = listed(dir.entries().unwrap());
    fresh.sort();
    assert_eq!(fresh, expected);
    for _ in 0..2 {
        let mut again = listed(dir.entries_from_start().unwrap());
        again.sort();
        assert_eq!(again, expected);
    }
    let removed = SysDir::open(tmp.path(), "").unwrap();
    fs::remove_dir_all(tmp.path()).unwrap();
    assert_eq!(removed.entries_from_start().unwrap(), []);
}

/// A link's target named in full, whatever its length: one of 255 bytes or more is read
/// again whole, not cut at the buffer the name is first read into.
#[test]
fn a_long_link_names_its_whole_target() {
    let (tmp, dir) = dir_with(&[]);
    for len in [254, 255, 256, 400] {
        let last = "d".repeat(len - "../".len());
        let link = format!("link{len}");
        std::os::unix::fs::symlink(format!("../{last}"), tmp.path().join(&link)).unwrap();
        assert_eq!(dir.link_target_name(&link).unwrap(), last, "{len}");
    }
    let err = dir.link_target_name("absent").unwrap_err();
    assert!(err.is_not_found(), "{err}");
    assert!(err.to_string().contains("absent"), "{err}");
}

/// An optional attribute that is absent is `None`, the first time (the open fails) and
/// after (remembered), and so is one under a directory that is not there; any other
/// failure is still an error.
#[test]
fn an_absent_optional_attribute_is_none_not_an_error() {
    let (tmp, dir) = dir_with(&[("sriov_numvfs", "4\n"), ("garbage", "x\n")]);
    fs::create_dir(tmp.path().join("subdir")).unwrap();
    // Settled: its absent names are remembered, as on sysfs.
    settle(tmp.path());
    let settled = fs::metadata(tmp.path()).unwrap().modified().unwrap();
    let mut held = HeldAttributes::default();
    let mut reader = AttributeReader::default();
    for _ in 0..2 {
        let read = |name, held: &mut HeldAttributes, reader: &mut AttributeReader| {
            dir.read_held_optional_u64(name, held, reader)
        };
        assert_eq!(
            read("sriov_numvfs", &mut held, &mut reader).unwrap(),
            Some(4)
        );
        assert_eq!(
            read("sriov_totalvfs", &mut held, &mut reader).unwrap(),
            None
        );
        assert_eq!(
            read("absent/sriov_numvfs", &mut held, &mut reader).unwrap(),
            None
        );
        let err = read("garbage", &mut held, &mut reader).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Parse, "{err}");
        let err = read("subdir", &mut held, &mut reader).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
        held.end_round();
    }
    // Made since behind the directory's back (its time as it was): still remembered as
    // absent, as on sysfs; found once the directory changed.
    fs::write(tmp.path().join("sriov_totalvfs"), "8\n").unwrap();
    fs::File::open(tmp.path())
        .unwrap()
        .set_modified(settled)
        .unwrap();
    let total = dir.read_held_optional_u64("sriov_totalvfs", &mut held, &mut reader);
    assert_eq!(total.unwrap(), None);
    held.end_round();
    fs::File::open(tmp.path())
        .unwrap()
        .set_modified(std::time::SystemTime::now())
        .unwrap();
    let total = dir.read_held_optional_u64("sriov_totalvfs", &mut held, &mut reader);
    assert_eq!(total.unwrap(), Some(8));
}

/// One name that is not UTF-8 is one entry of its own, after the others, which it does not
/// hide; used, it is a parse error naming the directory and the escaped name.
#[test]
fn a_name_that_is_not_utf8_hides_no_sibling() {
    let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n"), ("2", "")]);
    fs::write(tmp.path().join(OsStr::from_bytes(b"bad\xff")), "").unwrap();
    let entries = dir.entries().unwrap();
    assert_eq!(
        entries[..2],
        ["2", "port_rcv_data"].map(|n| Entry::Name(n.into()))
    );
    let err = entries[2].name().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Parse);
    let cause = format!(
        "list {}: entry name is not UTF-8: bad\\xff",
        tmp.path().display()
    );
    assert_eq!(err.to_string(), cause);
    assert_eq!(
        entries[2].to_string(),
        format!("{}/bad\\xff", tmp.path().display())
    );
}

/// Through `SysDir`: relative directory links work, a link out of the root is a file that
/// does not exist there, and a link's directories resolve inside the root too.
#[test]
fn sysdir_reads_through_relative_links_and_never_out_of_the_root() {
    let tmp = hostile_tree();
    let root = tmp.path().join("root");
    let class = SysDir::open(&root, "class/infiniband").unwrap();
    let device = class.subdir("mlx5_0").unwrap();
    let mut reader = AttributeReader::default();
    assert_eq!(device.read("fw_ver", &mut reader).unwrap(), "20.31");
    assert_eq!(
        device.read("board_id", &mut reader).unwrap(),
        "MT_0000000223"
    );
    assert_eq!(
        device.read("device/board_id", &mut reader).unwrap(),
        "MT_0000000223"
    );
    for name in [
        "absolute",
        "relative",
        "outside/shadow",
        "up/../outside/shadow",
    ] {
        let err = device.read(name, &mut reader).unwrap_err();
        assert!(err.is_not_found(), "{name}: {err}");
        assert!(device.read_file(name, 1 << 20).unwrap_err().is_not_found());
    }
    assert!(device
        .subdir("outside")
        .is_err_and(|err| err.is_not_found()));
    assert_eq!(device.link_target_name("device").unwrap(), "sibling");
    assert!(device
        .link_target("outside/link")
        .unwrap_err()
        .is_not_found());
    // The root named by the flag may itself be a link: the operator named it.
    symlink(&root, tmp.path().join("sys")).unwrap();
    let dir = SysDir::open(&tmp.path().join("sys"), "devices/mlx5_0").unwrap();
    assert_eq!(dir.read("ports/1/state", &mut reader).unwrap(), "4: ACTIVE");
}
