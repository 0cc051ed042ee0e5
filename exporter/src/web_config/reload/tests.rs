use std::io::Write as _;

use super::*;
use crate::web_config::UNKNOWN_USER_HASH;

fn users(names: &[&str]) -> String {
    let mut text = "basic_auth_users:\n".to_string();
    for name in names {
        text.push_str(&format!("  {name}: '{UNKNOWN_USER_HASH}'\n"));
    }
    text
}

/// Asks for the config until `done` holds of it (bounded).
fn eventually(file: &WebConfigFile, done: impl Fn(&WebConfig) -> bool) -> Arc<WebConfig> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let config = file.current();
        if done(&config) || Instant::now() > until {
            return config;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn failures(file: &WebConfigFile, reason: &str) -> u64 {
    file.reload_failures()
        .find(|(r, _)| *r == reason)
        .map(|(_, count)| count)
        .unwrap()
}

#[test]
fn a_file_rewritten_in_place_never_leaves_the_users_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, users(&["alice"])).unwrap();
    let file = WebConfigFile::open(&path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut without_users = 0;
            while !stop.load(Ordering::Relaxed) {
                without_users += usize::from(file.current().users.is_empty());
            }
            without_users
        })
    };
    // `cat > web.yml`: truncated, then written; here in two writes with a pause between.
    for round in 0..20 {
        let text = users(&["alice", &format!("bob{round}")]);
        let (head, tail) = text.split_at(text.len() / 2);
        let mut writer = std::fs::File::create(&path).unwrap();
        std::thread::sleep(Duration::from_millis(3));
        writer.write_all(head.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(3));
        writer.write_all(tail.as_bytes()).unwrap();
        drop(writer);
        std::thread::sleep(Duration::from_millis(40));
    }
    let last = eventually(&file, |config| config.users.contains_key("bob19"));
    stop.store(true, Ordering::Relaxed);
    assert_eq!(
        watcher.join().unwrap(),
        0,
        "a config without users was in force"
    );
    assert!(
        last.users.contains_key("bob19"),
        "the last writing was not taken"
    );
}

#[test]
fn a_reload_that_would_turn_auth_off_is_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, users(&["alice"])).unwrap();
    let file = WebConfigFile::open(&path).unwrap();
    std::fs::write(
        &path,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    .unwrap();
    let config = eventually(&file, |_| failures(&file, "weaker") == 1);
    assert_eq!(failures(&file, "weaker"), 1);
    assert!(config.users.contains_key("alice"));
    // An empty file is not a config either.
    std::fs::write(&path, "").unwrap();
    eventually(&file, |_| failures(&file, "empty") == 1);
    assert_eq!(failures(&file, "empty"), 1);
    assert!(file.current().users.contains_key("alice"));
}

#[test]
fn a_fifo_named_by_the_config_is_refused_without_blocking_anyone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.yml");
    std::fs::write(&path, users(&["alice"])).unwrap();
    let file = WebConfigFile::open(&path).unwrap();
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        dir.path().join("ca.crt"),
        rustix::fs::Mode::RUSR,
    )
    .unwrap();
    std::fs::write(
        &path,
        format!(
            "{}tls_server_config:\n  cert_file: ca.crt\n  key_file: ca.crt\n",
            users(&["alice"])
        ),
    )
    .unwrap();
    eventually(&file, |_| failures(&file, "unreadable") == 1);
    assert_eq!(failures(&file, "unreadable"), 1);
    assert!(file.current().tls.is_none());
    // And at start, an error at once, not a wait for a writer.
    std::fs::write(
        &path,
        "tls_server_config:\n  cert_file: ca.crt\n  key_file: ca.crt\n",
    )
    .unwrap();
    let started = Instant::now();
    assert!(matches!(
        WebConfigFile::open(&path),
        Err(WebConfigError::File(_))
    ));
    assert!(started.elapsed() < READ_DEADLINE);
}
