//! Where the server listens: a socket bound for each `--web.listen-address`, or the listening
//! sockets systemd passes under `--web.systemd-socket` (socket activation, sd_listen_fds(3):
//! `LISTEN_PID` names this process, `LISTEN_FDS` counts the descriptors from 3 on). `main`
//! takes them before any collector starts, so a port in use fails the start at once.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::io::{fcntl_setfd, FdFlags};
use rustix::net::sockopt::{socket_acceptconn, socket_domain, socket_type};
use rustix::net::{AddressFamily, SocketType};
use tokio::net::TcpListener;

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_PASSED_FD: RawFd = 3;

/// Why there is no listener to serve on.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("listening on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
    #[error("--web.systemd-socket: {0}")]
    Systemd(#[from] SystemdError),
}

#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("LISTEN_PID does not name this process: systemd passed no sockets (start it from a .socket unit)")]
    NotOurs,
    #[error("LISTEN_FDS is unset or not a positive count: systemd passed no sockets")]
    NoSockets,
    #[error("the sockets systemd passed are already taken")]
    AlreadyTaken,
    #[error("descriptor {fd} is not open")]
    NotOpen { fd: RawFd },
    #[error(
        "descriptor {fd} is not a listening TCP socket (ListenStream= with an address or port)"
    )]
    NotTcpListener { fd: RawFd },
    #[error("descriptor {fd}: {source}")]
    Io { fd: RawFd, source: std::io::Error },
}

/// Binds `[host]:port`; no host means every interface (IPv6 and IPv4 where available).
pub async fn bind(host: Option<&str>, port: u16) -> Result<TcpListener, ListenError> {
    let bound = match host {
        Some(host) => TcpListener::bind((host, port)).await,
        None => match TcpListener::bind(SocketAddr::from(([0u16; 8], port))).await {
            Ok(listener) => Ok(listener),
            Err(_) => TcpListener::bind(SocketAddr::from(([0u8; 4], port))).await,
        },
    };
    bound.map_err(|source| ListenError::Bind {
        address: match host {
            Some(host) if host.contains(':') => format!("[{host}]:{port}"),
            host => format!("{}:{port}", host.unwrap_or_default()),
        },
        source,
    })
}

/// Whether the passed descriptors were taken: each may have one owner only.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The listening sockets systemd passed to this process, each as a listener. They can be taken
/// once. `LISTEN_*` stay set: unsetting them would race other threads' reads of the
/// environment, and `LISTEN_PID` names this process only, so no child would take them.
pub fn systemd_sockets() -> Result<Vec<TcpListener>, ListenError> {
    let variable = |name| std::env::var(name).ok();
    let pid = variable("LISTEN_PID").and_then(|pid| pid.parse::<u32>().ok());
    if pid != Some(std::process::id()) {
        return Err(SystemdError::NotOurs.into());
    }
    let count = variable("LISTEN_FDS")
        .and_then(|count| count.parse::<RawFd>().ok())
        .filter(|&count| count > 0)
        .ok_or(SystemdError::NoSockets)?;
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Err(SystemdError::AlreadyTaken.into());
    }
    (FIRST_PASSED_FD..FIRST_PASSED_FD.saturating_add(count))
        .map(|fd| take_listener(fd).map_err(ListenError::from))
        .collect()
}

/// Takes passed descriptor `fd` as a listener, if it is a listening TCP socket.
fn take_listener(fd: RawFd) -> Result<TcpListener, SystemdError> {
    // SAFETY: fcntl(F_GETFD) only reads the flags of a descriptor number, open or not (EBADF);
    // no memory is passed.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(SystemdError::NotOpen { fd });
    }
    // SAFETY: the descriptor is open, and systemd passed it for this process to own (LISTEN_PID
    // names it); nothing else in the process refers to it, and `TAKEN` lets this run once.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let io = |source: std::io::Error| SystemdError::Io { fd, source };
    // As sd_listen_fds(3) does: no program this one starts inherits the listener.
    fcntl_setfd(&owned, FdFlags::CLOEXEC).map_err(|err| io(err.into()))?;
    let tcp = socket_domain(&owned)
        .is_ok_and(|family| family == AddressFamily::INET || family == AddressFamily::INET6);
    let stream = socket_type(&owned).is_ok_and(|kind| kind == SocketType::STREAM);
    if !(tcp && stream && socket_acceptconn(&owned).unwrap_or(false)) {
        return Err(SystemdError::NotTcpListener { fd });
    }
    let listener = std::net::TcpListener::from(owned);
    listener.set_nonblocking(true).map_err(io)?;
    TcpListener::from_std(listener).map_err(io)
}
