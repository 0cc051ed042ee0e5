//! Where the real binary listens: every `--web.listen-address` given, or the socket systemd
//! passes under `--web.systemd-socket`; each serves the same routes. (A port in use and a
//! systemd socket that is not there are start failures: `cli.rs`.)

use crate::util;

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use util::{Exporter, BINARY};

/// node_exporter's (exporter-toolkit's) semantics: a repeated flag adds a listener.
#[test]
fn each_listen_address_given_serves_metrics() {
    // `start` gives the first 127.0.0.1:0, this the second.
    let mut exporter = Exporter::start(&[
        "--collector.disable-defaults",
        "--web.listen-address=127.0.0.1:0",
    ]);
    let addresses = exporter.listening_addresses(2);
    assert_eq!(addresses.len(), 2, "{}", exporter.log());
    assert_ne!(addresses[0], addresses[1]);
    for address in addresses {
        exporter.address = address;
        let response = exporter.get("/metrics");
        assert_eq!(response.status, 200, "{}", exporter.address);
        assert!(response.text().contains("hpcnode_build_info"));
    }
}

/// Socket activation as systemd does it (sd_listen_fds(3)): the listening socket as descriptor
/// 3, `LISTEN_FDS=1`, and `LISTEN_PID` the exporter's own pid, which the shell sets to its pid
/// (`$$`) before it execs the exporter in its place.
#[test]
fn the_socket_systemd_passes_serves_metrics() {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = socket.local_addr().unwrap().to_string();
    let fd = socket.as_raw_fd();
    let mut command = Command::new("/bin/sh");
    command
        .args(["-c", "export LISTEN_PID=$$; exec \"$0\" \"$@\"", BINARY])
        .args(["--web.systemd-socket", "--collector.disable-defaults"])
        .env("LISTEN_FDS", "1");
    // SAFETY: runs in the forked child before exec, and makes one async-signal-safe system call
    // (dup2, or fcntl when the socket is already descriptor 3); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec: clear it instead.
            let moved = match fd {
                3 => libc::fcntl(3, libc::F_SETFD, 0),
                fd => libc::dup2(fd, 3),
            };
            if moved < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let exporter = Exporter::start_command(command);
    drop(socket);
    assert_eq!(exporter.address, address);
    let response = exporter.get("/metrics");
    assert_eq!(response.status, 200);
    assert!(response.text().contains("hpcnode_build_info"));
}
