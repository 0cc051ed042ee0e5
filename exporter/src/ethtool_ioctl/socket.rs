//! The only code that makes the `SIOCETHTOOL` system call: one datagram socket (AF_INET, or
//! AF_UNIX on a kernel without IPv4: `sock_do_ioctl` hands any family's unknown ioctl to
//! `dev_ioctl`), a `struct ifreq` naming the netdev with `ifr_data` at the command, and the
//! command's buffer.
//!
//! A buffer ends at a page the process may not touch. Before "ethtool: Avoid overflowing
//! userspace buffer on stats query" (Gal Pressman, December 2025, sent to the stable kernels)
//! `GSTRINGS` and `GSTATS` write as many entries as the driver counts at that moment,
//! whatever room the caller made; a count grown since the caller asked (mlx5e's per-channel statistics after
//! `ethtool -L`) would write past an ordinary allocation. Here the kernel's copy stops at the
//! guard page instead and the call fails with `EFAULT`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{
    sset_info_answer, sset_info_request, stats_answer, stats_request, strings_answer,
    strings_request, AnswerError,
};

#[derive(Debug, thiserror::Error)]
pub enum IoctlError {
    #[error("{0}: {1}")]
    Io(&'static str, io::Error),
    #[error("{0}")]
    Answer(#[from] AnswerError),
    #[error("a netdev name longer than IFNAMSIZ")]
    Name,
}

impl IoctlError {
    /// The errno the kernel answered, if it did.
    pub fn errno(&self) -> Option<i32> {
        match self {
            IoctlError::Io(_, err) => err.raw_os_error(),
            _ => None,
        }
    }
}

/// A datagram socket for `SIOCETHTOOL`.
pub struct Socket {
    fd: OwnedFd,
}

impl Socket {
    pub fn open() -> Result<Socket, IoctlError> {
        let open = |family| {
            // SAFETY: socket takes plain integers and returns a new descriptor or -1.
            let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            // SAFETY: fd is a descriptor this call just opened and nothing else owns.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let fd = open(libc::AF_INET).or_else(|| open(libc::AF_UNIX));
        let fd = fd.ok_or_else(|| IoctlError::Io("socket", io::Error::last_os_error()))?;
        Ok(Socket { fd })
    }

    /// How many statistics `netdev` has (`ETHTOOL_GSSET_INFO`); `None`: it has none.
    pub fn stats_count(&self, netdev: &str) -> Result<Option<u32>, IoctlError> {
        let answer = self.call(netdev, "ETHTOOL_GSSET_INFO", &sset_info_request())?;
        Ok(sset_info_answer(&answer)?)
    }

    /// The names of `netdev`'s `count` statistics (`ETHTOOL_GSTRINGS`).
    pub fn stat_names(&self, netdev: &str, count: u32) -> Result<Vec<String>, IoctlError> {
        let answer = self.call(netdev, "ETHTOOL_GSTRINGS", &strings_request(count))?;
        Ok(strings_answer(&answer, count)?)
    }

    /// The values of `netdev`'s `count` statistics (`ETHTOOL_GSTATS`).
    pub fn stats(&self, netdev: &str, count: u32) -> Result<Vec<u64>, IoctlError> {
        let answer = self.call(netdev, "ETHTOOL_GSTATS", &stats_request(count))?;
        Ok(stats_answer(&answer, count)?)
    }

    /// Hands `request` to the kernel for `netdev` and returns the buffer as it left it.
    fn call(
        &self,
        netdev: &str,
        name: &'static str,
        request: &[u8],
    ) -> Result<Vec<u8>, IoctlError> {
        // SAFETY: an all-zero ifreq is a valid one (an empty name, a null union).
        let mut ifreq: libc::ifreq = unsafe { std::mem::zeroed() };
        // One byte kept for the NUL the zeroed struct already holds.
        if netdev.len() >= ifreq.ifr_name.len() {
            return Err(IoctlError::Name);
        }
        for (to, from) in ifreq.ifr_name.iter_mut().zip(netdev.bytes()) {
            *to = from as libc::c_char;
        }
        let mut buffer = Guarded::new(request.len()).map_err(|err| IoctlError::Io("mmap", err))?;
        buffer.bytes().copy_from_slice(request);
        ifreq.ifr_ifru.ifru_data = buffer.bytes().as_mut_ptr().cast();
        // SAFETY: ifreq lives across the call, names the netdev NUL-terminated and points at
        // the buffer, which holds the command struct the kernel reads and writes; where the
        // kernel would write past it, it meets the guard page and fails with EFAULT.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifreq) };
        if rc < 0 {
            return Err(IoctlError::Io(name, io::Error::last_os_error()));
        }
        Ok(buffer.bytes().to_vec())
    }
}

/// Bytes that end where an inaccessible page begins.
struct Guarded {
    map: *mut libc::c_void,
    map_len: usize,
    start: usize,
    len: usize,
}

impl Guarded {
    fn new(len: usize) -> io::Result<Guarded> {
        // SAFETY: sysconf takes a plain integer.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::other("no page size"))?;
        let usable = len.div_ceil(page).max(1) * page;
        let map_len = usable + page;
        // SAFETY: an anonymous private mapping of fresh pages, at an address the kernel picks.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let guarded = Guarded {
            map,
            map_len,
            start: usable - len,
            len,
        };
        // SAFETY: the last page of the mapping just made, which nothing refers to yet.
        let rc =
            unsafe { libc::mprotect(map.cast::<u8>().add(usable).cast(), page, libc::PROT_NONE) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(guarded)
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: start..start + len lies in the mapping's readable and writable pages, which
        // live as long as self and are reached only through it.
        unsafe { std::slice::from_raw_parts_mut(self.map.cast::<u8>().add(self.start), self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in new, unmapped once; no slice of it outlives self.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}
