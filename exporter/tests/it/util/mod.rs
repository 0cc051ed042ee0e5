//! Helpers for integration tests that run the real binary (ripgrep's tests/util.rs idea).

pub mod golden;
pub mod kernel;
pub mod web;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BINARY: &str = env!("CARGO_BIN_EXE_hpcnode_exporter");

/// The repository's `tests/` directory: the fixture trees, which the shell suites read too.
pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests")
}

/// A file of `exporter/tests/support/`: the stand-in libraries and helpers only these tests use.
pub fn support(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
}

pub fn fixture(name: &str) -> PathBuf {
    tests_dir().join("fixtures").join(name).join("sys")
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A running exporter on a loopback port of its own choosing; killed on drop.
pub struct Exporter {
    child: Child,
    pub address: String,
    log: Arc<Mutex<String>>,
    /// Held while stderr is left unread (`start_with_stalled_stderr`); dropping it closes the pipe.
    _stalled_stderr: Option<mpsc::Sender<()>>,
}

impl Exporter {
    pub fn start(args: &[&str]) -> Exporter {
        Exporter::start_as(args, None)
    }

    /// Starts the binary with `--web.listen-address=127.0.0.1:0`, as `uid` when given, and
    /// waits (bounded) for its "listening" log line to learn the port.
    pub fn start_as(args: &[&str], uid: Option<u32>) -> Exporter {
        Exporter::start_with_env(args, uid, &[])
    }

    /// As `start_as`, with extra environment variables (`LD_LIBRARY_PATH` for a test library).
    pub fn start_with_env(args: &[&str], uid: Option<u32>, env: &[(&str, &Path)]) -> Exporter {
        let mut command = Exporter::command(args);
        command.envs(env.iter().copied());
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        Exporter::spawn(command, false)
    }

    /// As `start`, but stderr is a pipe nobody reads after the "listening" line, like a stuck
    /// journald: once it is full, the exporter's writes to it would block. It stays open, and
    /// unread, until the exporter is dropped.
    pub fn start_with_stalled_stderr(args: &[&str]) -> Exporter {
        Exporter::spawn(Exporter::command(args), true)
    }

    /// As `start`, under a soft and hard limit on open files (systemd's default soft limit is
    /// 1024, whatever the hard one).
    pub fn start_with_open_files(args: &[&str], soft: u64, hard: u64) -> Exporter {
        use rustix::process::{setrlimit, Resource, Rlimit};
        let mut command = Exporter::command(args);
        let limit = Rlimit {
            current: Some(soft),
            maximum: Some(hard),
        };
        // SAFETY: the closure runs in the forked child before exec; it only makes one system
        // call (setrlimit, async-signal-safe) and allocates nothing.
        unsafe {
            command.pre_exec(move || setrlimit(Resource::Nofile, limit).map_err(Into::into));
        }
        Exporter::spawn(command, false)
    }

    /// As `start`, for a command the test built (its own listeners, descriptors passed in).
    pub fn start_command(mut command: Command) -> Exporter {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Exporter::spawn(command, false)
    }

    fn command(args: &[&str]) -> Command {
        let mut command = Command::new(BINARY);
        command
            .arg("--web.listen-address=127.0.0.1:0")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    fn spawn(mut command: Command, stall: bool) -> Exporter {
        let mut child = command.spawn().expect("start hpcnode_exporter");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (found, address) = mpsc::channel();
        let sink = log.clone();
        let (stalled_stderr, held) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut found = Some(found);
            let mut stderr = BufReader::new(stderr);
            for line in (&mut stderr).lines().map_while(Result::ok) {
                if line.contains("msg=listening") {
                    if let (Some(tx), Some(addr)) = (found.take(), field(&line, "address")) {
                        let _ = tx.send(addr);
                    }
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
                if stall && found.is_none() {
                    // Keeps the pipe open, unread, until the exporter is dropped.
                    let _ = held.recv();
                    return;
                }
            }
        });
        let address = match address.recv_timeout(Duration::from_secs(20)) {
            Ok(address) => address,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("exporter did not start; log:\n{}", log.lock().unwrap());
            }
        };
        Exporter {
            child,
            address,
            log,
            _stalled_stderr: stall.then_some(stalled_stderr),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The log once it contains `needle` (its reader thread may lag behind a response), or
    /// as it is after 5 s.
    pub fn log_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.log();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The addresses of its "listening" lines, once there are `count` of them (its reader
    /// thread may lag behind the first) or as they are after 5 s.
    pub fn listening_addresses(&self, count: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let addresses: Vec<String> = self
                .log()
                .lines()
                .filter(|line| line.contains("msg=listening"))
                .filter_map(|line| field(line, "address"))
                .collect();
            if addresses.len() >= count || Instant::now() > deadline {
                return addresses;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn get(&self, path: &str) -> Response {
        self.get_with(path, &[])
    }

    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        self.request(&get_request(path, headers))
    }

    /// `get`, failing the test unless the whole response comes within `limit`.
    pub fn get_within(&self, path: &str, limit: Duration) -> Response {
        let started = Instant::now();
        let response = self.request_within(&get_request(path, &[]), limit);
        assert!(
            started.elapsed() < limit,
            "GET {path} took {:?}",
            started.elapsed()
        );
        response
    }

    /// Sends raw bytes and reads the whole response (the server closes after it).
    pub fn request(&self, raw: &str) -> Response {
        self.request_within(raw, Duration::from_secs(30))
    }

    /// `request`, with no read waiting longer than `limit`.
    fn request_within(&self, raw: &str, limit: Duration) -> Response {
        let mut stream = self.connect();
        stream.set_read_timeout(Some(limit)).unwrap();
        stream.write_all(raw.as_bytes()).expect("send request");
        let mut bytes = Vec::new();
        if let Err(err) = stream.read_to_end(&mut bytes) {
            panic!("no whole response within {limit:?} (a read timed out): {err}");
        }
        Response::parse(&bytes)
    }

    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.exit_within(Duration::from_secs(30))
            .expect("exporter ignored SIGTERM")
    }

    /// Sends `signal` to the exporter.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) takes plain integers; the pid is still our child's, which only this
        // value reaps (in `exit_within` or on drop).
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// The exit status, once the exporter exits within `within`; `None` while it runs on.
    pub fn exit_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A `/proc/<pid>/status` field in its unit (`Threads`: a count, `VmRSS`: KiB).
    pub fn status_field(&self, name: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/<pid>/status"))
    }

    /// Open file descriptors.
    pub fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    /// Open descriptors of files under `dir` (the attributes a collector holds open).
    pub fn open_files_under(&self, dir: &Path) -> usize {
        let dir = std::fs::canonicalize(dir).unwrap();
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.starts_with(&dir))
            .count()
    }

    /// A client that stops reading: it sends a GET of `path` with a receive buffer of a few KiB,
    /// reads the status line and no more, and keeps the connection open. Returns the status.
    pub fn stalled_get(&self, path: &str) -> (u16, TcpStream) {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        // Small before connecting, so the window the server may fill stays small.
        socket.set_recv_buffer_size(4096).unwrap();
        let address: std::net::SocketAddr = self.address.parse().unwrap();
        socket.connect(&address.into()).expect("connect");
        let mut stream: TcpStream = socket.into();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut status_line = [0u8; 12];
        stream.read_exact(&mut status_line).expect("status line");
        let status = std::str::from_utf8(&status_line[9..12])
            .ok()
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        (status, stream)
    }

    /// `Threads:` from /proc/<pid>/status.
    pub fn threads(&self) -> usize {
        self.status_field("Threads") as usize
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `GET` that asks the server to close after answering.
fn get_request(path: &str, headers: &[(&str, &str)]) -> String {
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}\r\n")
}

/// `key=value` or `key="value"` from a logfmt line.
fn field(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[start..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split(' ').next()?,
    };
    Some(value.to_string())
}

/// A chunked body's data (a response whose length the server did not know when it began: a
/// scrape's text is encoded as it is written). A body cut short fails the test.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    loop {
        let line = body.windows(2).position(|w| w == b"\r\n");
        let line =
            line.unwrap_or_else(|| panic!("a chunked body cut short after {} bytes", data.len()));
        let size = String::from_utf8_lossy(&body[..line]);
        let size = size.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size, 16).unwrap_or_else(|_| panic!("chunk size {size:?}"));
        body = &body[line + 2..];
        if size == 0 {
            return data;
        }
        let chunk = body.get(..size);
        data.extend_from_slice(
            chunk.unwrap_or_else(|| panic!("a chunk of {size} bytes cut short")),
        );
        assert_eq!(
            body.get(size..size + 2),
            Some(&b"\r\n"[..]),
            "no CRLF after a chunk"
        );
        body = &body[size + 2..];
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    fn parse(bytes: &[u8]) -> Response {
        let split = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(bytes)));
        let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("status line");
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let body = &bytes[split + 4..];
        let chunked = (headers.iter())
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = match chunked {
            true => dechunk(body),
            false => body.to_vec(),
        };
        Response {
            status,
            headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }
}

/// RDMA devices on a node large enough that its metrics (6 MB) are more than the kernel's
/// socket buffers take (`tcp_wmem`'s 4 MiB): a client that stops reading leaves most of the
/// body with the exporter.
pub const LARGE_NODE: usize = 1000;

/// A copy of a fixture tree in a temporary directory that tests may modify.
pub struct TreeCopy {
    pub dir: tempfile::TempDir,
}

impl TreeCopy {
    pub fn of(fixture_name: &str) -> TreeCopy {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg(fixture(fixture_name))
            .arg(dir.path())
            .status()
            .expect("cp");
        assert!(status.success());
        TreeCopy { dir }
    }

    /// A copy of a whole fixture directory: `sys/` and the rootfs content beside it.
    pub fn with_rootfs(fixture_name: &str) -> TreeCopy {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg(tests_dir().join("fixtures").join(fixture_name).join("."))
            .arg(dir.path())
            .status()
            .expect("cp");
        assert!(status.success());
        TreeCopy { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn sys(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    pub fn sys_arg(&self) -> String {
        format!("--path.sysfs={}", self.sys().display())
    }

    /// A sysfs tree with `count` RDMA devices, `mlx5_0` to `mlx5_<count-1>`, each a copy of the
    /// `procfs` capture's ConnectX-4 (one port, 21 counters, 22 hw_counters): a large node.
    /// The copies share their files (hard links): thousands of files are made in a second.
    pub fn many_rdma_devices(count: usize) -> TreeCopy {
        let dir = tempfile::tempdir().unwrap();
        let class = dir.path().join("sys/class/infiniband");
        std::fs::create_dir_all(&class).unwrap();
        let first = class.join("mlx5_0");
        copy_tree(
            &fixture("procfs").join("class/infiniband/mlx5_0"),
            &first,
            |from, to| std::fs::copy(from, to).map(drop),
        );
        for n in 1..count {
            copy_tree(&first, &class.join(format!("mlx5_{n}")), |from, to| {
                std::fs::hard_link(from, to)
            });
        }
        TreeCopy { dir }
    }
}

/// Copies a tree of directories and regular files, each file with `file`.
fn copy_tree(from: &Path, to: &Path, file: fn(&Path, &Path) -> std::io::Result<()>) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, file);
        } else {
            file(&entry.path(), &target).unwrap();
        }
    }
}

/// The log lines `command` (the exporter, on a free port) writes up to "listening" (logfmt or
/// JSON), within 20 s; then the exporter is stopped. Read on a thread, so that a binary that
/// never logs that line (a changed encoding, a failed start) fails the test instead of hanging.
pub fn lines_until_listening(mut command: Command) -> Vec<String> {
    let mut child = command
        .arg("--web.listen-address=127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (sink, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if sink.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    while let Ok(line) = received.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let listening = line.contains("\"msg\":\"listening\"") || line.contains("msg=listening");
        lines.push(line);
        if listening {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

/// Runs a command with input on stdin; returns (success, stdout + stderr).
pub fn run_with_stdin(program: &str, args: &[&str], input: &[u8]) -> (bool, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} is required for this test (see CONTRIBUTING.md: tests/setup.sh installs it): {e}"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Files on a FUSE filesystem that never answer a read: a wedged driver, for real, in the
/// kernel's read path. Unmounted on drop.
pub struct HungFiles {
    mountpoint: PathBuf,
    fuse: Child,
}

impl HungFiles {
    /// Replaces the directory `dir` by a mount holding the files `names`, each hanging on read.
    /// `None` (after saying why) where FUSE cannot be mounted; in CI that is a failure.
    pub fn mount(test: &str, dir: &Path, names: &[String]) -> Option<HungFiles> {
        if !is_root() || !Path::new("/dev/fuse").exists() {
            let why = "needs root and /dev/fuse to mount a FUSE filesystem";
            assert!(
                std::env::var_os("CI").is_none(),
                "{test} must run in CI: {why}"
            );
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::create_dir(dir).unwrap();
        let fuse = Command::new("/usr/bin/python3")
            .arg(support("hung_sysfs.py"))
            .arg(dir)
            .args(names)
            .stdout(Stdio::null())
            .spawn()
            .expect("start FUSE server (apt-get install python3-fusepy fuse3)");
        let hung = HungFiles {
            mountpoint: dir.to_path_buf(),
            fuse,
        };
        let started = Instant::now();
        while !dir.join(&names[0]).exists() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "FUSE mount did not appear"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(hung)
    }
}

impl Drop for HungFiles {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
        let _ = self.fuse.kill();
        let _ = self.fuse.wait();
    }
}

/// A copy of the real procfs tree whose `mlx4_0` port 2 counters hang on read.
pub struct HungTree {
    // Unmounted before the tree is deleted: fields drop in this order.
    _hung: HungFiles,
    pub tree: TreeCopy,
}

impl HungTree {
    pub fn mount(test: &str) -> Option<HungTree> {
        let tree = TreeCopy::of("procfs");
        let counters = tree.sys().join("class/infiniband/mlx4_0/ports/2/counters");
        let names: Vec<String> = std::fs::read_dir(&counters)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        let hung = HungFiles::mount(test, &counters, &names)?;
        Some(HungTree { _hung: hung, tree })
    }
}

/// A whole fixture directory: `sys/`, `proc/` and rootfs content (`etc/`, `lib/`) beside them.
pub fn fixture_root(name: &str) -> PathBuf {
    tests_dir().join("fixtures").join(name)
}

/// The exporter with only `collector` on and every path rooted in the fixture directory `root`
/// (`--path.procfs=<root>/proc --path.sysfs=<root>/sys --path.rootfs=<root>`).
pub fn start_on_root(collector: &str, root: &Path, extra: &[&str]) -> Exporter {
    let flags = [
        format!("--collector.{collector}"),
        format!("--path.procfs={}", root.join("proc").display()),
        format!("--path.sysfs={}", root.join("sys").display()),
        format!("--path.rootfs={}", root.display()),
    ];
    let mut args = vec!["--collector.disable-defaults"];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(extra);
    Exporter::start(&args)
}

/// Debian's rdma-core, unpacked (not installed).
pub fn rdma_core() -> PathBuf {
    let root = std::env::var_os("HPCNODE_RDMA_CORE")
        .map(PathBuf::from)
        .unwrap_or_else(|| tests_dir().join("../target/rdma-core"));
    assert!(
        root.join("usr/include/infiniband/verbs.h").exists(),
        "{} lacks rdma-core: run exporter/tests/support/fetch-rdma-core.sh (tests/setup.sh does)",
        root.display()
    );
    root
}

/// The path of the real libibverbs.so.1 that matches the header the layout test reads (whether
/// or not the machine has one installed: qemu's packages pull libibverbs1 in).
pub fn libibverbs() -> String {
    std::fs::read_dir(rdma_core().join("usr/lib"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("libibverbs.so.1"))
        .find(|lib| lib.exists())
        .expect("libibverbs.so.1 in the unpacked rdma-core")
        .display()
        .to_string()
}
