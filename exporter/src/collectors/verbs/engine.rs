//! The measurements: RC queue pairs connected over InfiniBand (LID) or RoCE (GID), RDMA WRITE
//! bandwidth with a queue of outstanding writes (ib_write_bw), and an RDMA WRITE ping-pong that
//! polls the last byte of the message (ib_write_lat).

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::ffi::{self, Gid};
use super::resources::{CompletionQueue, Device, ProtectionDomain, QueuePair, RegisteredBuffer};
use super::ProbeError;

/// Size of a latency message (ib_write_lat's default is 2 bytes).
pub const LATENCY_MESSAGE: usize = 8;

/// What to measure and how long each step may take.
#[derive(Debug, Clone)]
pub struct Params {
    pub message_size: usize,
    pub queue_depth: u32,
    pub duration: Duration,
    pub latency_iterations: u32,
    /// The longest any single wait (a completion, an echo, a peer message) may take.
    pub step_timeout: Duration,
}

impl Default for Params {
    /// 64 KiB writes, 128 in flight (ib_write_bw's default depth) for 2 s saturate EDR and HDR
    /// links; 1000 ping-pongs give a stable median.
    fn default() -> Self {
        Params {
            message_size: 64 * 1024,
            queue_depth: 128,
            duration: Duration::from_secs(2),
            latency_iterations: 1000,
            step_timeout: Duration::from_secs(5),
        }
    }
}

/// How a port is addressed: its LID on InfiniBand, a RoCE v2 GID on Ethernet.
#[derive(Debug, Clone, Copy)]
pub struct PortAddress {
    pub port: u8,
    pub lid: u16,
    /// `Some` on RoCE: the GID index and its GID.
    pub gid: Option<(u8, Gid)>,
    /// `enum ibv_mtu` (1 = 256 .. 5 = 4096).
    pub active_mtu: u8,
}

/// What one side tells the other so that it can connect and write into its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Endpoint {
    pub qp_num: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
    pub mtu: u8,
}

/// The bytes a loopback run registers (and the kernel pins): two sides of
/// [`Side::new`]'s buffer, each twice the message size.
pub fn pinned_bytes(params: &Params) -> u64 {
    4 * params.message_size.max(LATENCY_MESSAGE) as u64
}

/// One side of a connection: its QP and its dedicated buffer, laid out as
/// `[receive area: message_size][send area: message_size]`.
pub struct Side {
    pub qp: QueuePair,
    pub buffer: RegisteredBuffer,
    pub message_size: usize,
    psn: u32,
}

impl Side {
    pub fn new(
        pd: &Rc<ProtectionDomain>,
        device: &Rc<Device>,
        params: &Params,
        psn: u32,
    ) -> Result<Side, ProbeError> {
        let message_size = params.message_size.max(LATENCY_MESSAGE);
        let len = message_size
            .checked_mul(2)
            .ok_or(ProbeError::Invalid("message size"))?;
        let cq = CompletionQueue::new(device, params.queue_depth)?;
        let qp = QueuePair::new(pd, &cq, params.queue_depth)?;
        let buffer = RegisteredBuffer::new(pd, len)?;
        Ok(Side {
            qp,
            buffer,
            message_size,
            psn: psn & 0xff_ffff,
        })
    }

    pub fn endpoint(&self, address: &PortAddress) -> Endpoint {
        Endpoint {
            qp_num: self.qp.qp_num(),
            psn: self.psn,
            lid: address.lid,
            gid: address.gid.map(|(_, gid)| gid.raw).unwrap_or_default(),
            rkey: self.buffer.rkey(),
            addr: self.buffer.addr(),
            len: self.message_size as u64,
            mtu: address.active_mtu,
        }
    }

    /// RESET -> INIT -> RTR -> RTS towards `remote`, at the smaller of both ports' MTUs.
    pub fn connect(&self, address: &PortAddress, remote: &Endpoint) -> Result<(), ProbeError> {
        let mut init = ffi::QpAttr {
            qp_state: ffi::QPS_INIT,
            pkey_index: 0,
            port_num: address.port,
            qp_access_flags: ffi::ACCESS_REMOTE_WRITE | ffi::ACCESS_LOCAL_WRITE,
            ..Default::default()
        };
        self.qp.modify(
            &mut init,
            ffi::QP_STATE | ffi::QP_PKEY_INDEX | ffi::QP_PORT | ffi::QP_ACCESS_FLAGS,
        )?;

        let mut ah = ffi::AhAttr {
            dlid: remote.lid,
            port_num: address.port,
            ..Default::default()
        };
        if let Some((index, _)) = address.gid {
            ah.is_global = 1;
            ah.grh.dgid = Gid { raw: remote.gid };
            ah.grh.sgid_index = index;
            ah.grh.hop_limit = 64;
        }
        let mut rtr = ffi::QpAttr {
            qp_state: ffi::QPS_RTR,
            path_mtu: u32::from(address.active_mtu.min(remote.mtu).max(1)),
            dest_qp_num: remote.qp_num,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..Default::default()
        };
        self.qp.modify(
            &mut rtr,
            ffi::QP_STATE
                | ffi::QP_AV
                | ffi::QP_PATH_MTU
                | ffi::QP_DEST_QPN
                | ffi::QP_RQ_PSN
                | ffi::QP_MAX_DEST_RD_ATOMIC
                | ffi::QP_MIN_RNR_TIMER,
        )?;

        let mut rts = ffi::QpAttr {
            qp_state: ffi::QPS_RTS,
            // 4.096 us * 2^14 = 67 ms per retry: generous for emulated links.
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: self.psn,
            max_rd_atomic: 1,
            ..Default::default()
        };
        self.qp.modify(
            &mut rts,
            ffi::QP_STATE
                | ffi::QP_TIMEOUT
                | ffi::QP_RETRY_CNT
                | ffi::QP_RNR_RETRY
                | ffi::QP_SQ_PSN
                | ffi::QP_MAX_QP_RD_ATOMIC,
        )
    }

    fn send_area(&self) -> u64 {
        self.buffer.addr() + self.message_size as u64
    }

    /// Posts one signaled RDMA WRITE of `len` bytes from the send area into `remote`'s
    /// receive area.
    fn post_write(&self, remote: &Endpoint, len: usize, wr_id: u64) -> Result<(), ProbeError> {
        let mut sge = ffi::Sge {
            addr: self.send_area(),
            length: u32::try_from(len).map_err(|_| ProbeError::Invalid("message size"))?,
            lkey: self.buffer.lkey(),
        };
        let mut wr = ffi::SendWr::rdma_write(
            wr_id,
            &mut sge,
            remote.addr,
            remote.rkey,
            ffi::SEND_SIGNALED,
        );
        self.qp.post_write(&mut wr)
    }

    /// Waits (bounded) until `count` completions have been reaped.
    fn reap(&self, count: usize, timeout: Duration) -> Result<(), ProbeError> {
        let deadline = Instant::now() + timeout;
        let mut wc = [ffi::Wc::default(); 4];
        let mut left = count;
        while left > 0 {
            left = left.saturating_sub(self.qp.cq.poll(&mut wc[..left.min(4)])?);
            if Instant::now() > deadline {
                return Err(ProbeError::Timeout("a write completion"));
            }
        }
        Ok(())
    }

    /// Waits (bounded) until the last byte of the receive area reads `marker`.
    fn await_marker(&self, marker: u8, timeout: Duration) -> Result<(), ProbeError> {
        let deadline = Instant::now() + timeout;
        while self.buffer.read_byte(LATENCY_MESSAGE - 1) != marker {
            if Instant::now() > deadline {
                return Err(ProbeError::Timeout("the ping-pong echo"));
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Clears the latency message in the receive area (bandwidth writes left data there).
    pub fn clear_receive_area(&self) {
        self.buffer.fill(0, LATENCY_MESSAGE, 0);
    }

    /// One echo of the responder's side of the ping-pong: waits for `marker`, writes it back.
    pub fn echo(&self, remote: &Endpoint, marker: u8, timeout: Duration) -> Result<(), ProbeError> {
        self.await_marker(marker, timeout)?;
        self.buffer.fill(self.message_size, LATENCY_MESSAGE, marker);
        self.post_write(remote, LATENCY_MESSAGE, u64::from(marker))?;
        self.reap(1, timeout)
    }
}

/// The marker of ping-pong iteration `i`: never 0, the cleared value.
pub fn marker(iteration: u32) -> u8 {
    (iteration % 255 + 1) as u8
}

/// A bandwidth measurement, ib_write_bw's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    pub message_size: usize,
    pub iterations: u64,
    pub peak_bytes_per_second: f64,
    pub average_bytes_per_second: f64,
}

impl Bandwidth {
    pub fn messages_per_second(&self) -> f64 {
        self.average_bytes_per_second / self.message_size as f64
    }
}

/// What a running measurement reports now and then (for a progress indicator).
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    Bandwidth { elapsed: Duration, bytes: u64 },
    Latency { done: u32, of: u32 },
}

/// Windows over which the peak bandwidth is taken, and progress reported.
const WINDOW: Duration = Duration::from_millis(100);

/// RDMA WRITEs of `message_size` bytes into `remote`, `queue_depth` in flight, for `duration`.
/// As ib_write_bw's duration mode, the average is taken over the middle half of the run (its
/// default margin is a quarter of the duration on each side): the ramp-up and the drain of the
/// writes in flight at the end are left out. The peak is the best 100 ms window.
pub fn measure_bandwidth(
    side: &Side,
    remote: &Endpoint,
    params: &Params,
    progress: &mut dyn FnMut(Progress),
) -> Result<Bandwidth, ProbeError> {
    let size = side.message_size as u64;
    let depth = usize::try_from(params.queue_depth).unwrap_or(1).max(1);
    let mut wc = vec![ffi::Wc::default(); depth.min(64)];
    let started = Instant::now();
    let end = started + params.duration;
    let (sample_from, sample_until) = (started + params.duration / 4, end - params.duration / 4);
    let (mut outstanding, mut completed) = (0usize, 0u64);
    // Completions and times at the first and the last poll within the sample window.
    let mut sample: Option<((Instant, u64), (Instant, u64))> = None;
    let (mut window_start, mut window_completed) = (started, 0u64);
    let mut peak = 0.0f64;
    let mut last_progress = started;
    loop {
        let now = Instant::now();
        let running = now < end;
        while outstanding < depth && running {
            side.post_write(remote, size as usize, completed + outstanding as u64)?;
            outstanding += 1;
        }
        let reaped = side.qp.cq.poll(&mut wc)?;
        if reaped > 0 {
            outstanding -= reaped;
            completed += reaped as u64;
            last_progress = now;
        } else if now.duration_since(last_progress) > params.step_timeout {
            return Err(ProbeError::Timeout("write completions"));
        }
        if (sample_from..sample_until).contains(&now) {
            let first = sample.map_or((now, completed), |(first, _)| first);
            sample = Some((first, (now, completed)));
        }
        let window = now.duration_since(window_start);
        if running && window >= WINDOW {
            let bytes = (completed - window_completed) * size;
            peak = peak.max(bytes as f64 / window.as_secs_f64());
            (window_start, window_completed) = (now, completed);
            progress(Progress::Bandwidth {
                elapsed: now.duration_since(started),
                bytes: completed * size,
            });
        }
        if outstanding == 0 && !running {
            break;
        }
    }
    // A run too short or a link too slow for completions within the window: the whole run.
    let ((from, first), (until, last)) = match sample {
        Some(((from, first), (until, last))) if last > first => ((from, first), (until, last)),
        _ => ((started, 0), (Instant::now(), completed)),
    };
    let counted = last - first;
    let average = (counted * size) as f64 / until.duration_since(from).as_secs_f64().max(1e-9);
    Ok(Bandwidth {
        message_size: side.message_size,
        iterations: counted,
        // A run shorter than one window has no window of its own.
        peak_bytes_per_second: peak.max(average),
        average_bytes_per_second: average,
    })
}

/// The ping-pong's typical one-way latency: half the median round trip (ib_write_lat's
/// `t_typical`). `echo` performs the other side's part of each round trip (in loopback mode it
/// is the local second QP; with a peer, the responder runs it on its own).
pub fn measure_latency(
    side: &Side,
    remote: &Endpoint,
    params: &Params,
    echo: &mut dyn FnMut(u8) -> Result<(), ProbeError>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Duration, ProbeError> {
    let iterations = params.latency_iterations.max(1);
    let mut round_trips = Vec::with_capacity(iterations as usize);
    for i in 0..iterations {
        let marker = marker(i);
        side.buffer.fill(side.message_size, LATENCY_MESSAGE, marker);
        let started = Instant::now();
        side.post_write(remote, LATENCY_MESSAGE, u64::from(i))?;
        echo(marker)?;
        side.await_marker(marker, params.step_timeout)?;
        round_trips.push(started.elapsed());
        side.reap(1, params.step_timeout)?;
        if i % 100 == 99 {
            progress(Progress::Latency {
                done: i + 1,
                of: iterations,
            });
        }
    }
    round_trips.sort();
    Ok(round_trips[round_trips.len() / 2] / 2)
}

/// A finished probe: bandwidth and latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    pub bandwidth: Bandwidth,
    pub latency: Duration,
}

/// Loopback: two QPs on one port, connected to each other.
pub fn run_loopback(
    device: &Rc<Device>,
    address: &PortAddress,
    params: &Params,
    progress: &mut dyn FnMut(Progress),
) -> Result<Measurement, ProbeError> {
    let pd = ProtectionDomain::new(device)?;
    let client = Side::new(&pd, device, params, initial_psn())?;
    let server = Side::new(&pd, device, params, initial_psn())?;
    let (client_end, server_end) = (client.endpoint(address), server.endpoint(address));
    client.connect(address, &server_end)?;
    server.connect(address, &client_end)?;
    let bandwidth = measure_bandwidth(&client, &server_end, params, progress)?;
    client.clear_receive_area();
    server.clear_receive_area();
    let timeout = params.step_timeout;
    let latency = measure_latency(
        &client,
        &server_end,
        params,
        &mut |marker| server.echo(&client_end, marker, timeout),
        progress,
    )?;
    Ok(Measurement { bandwidth, latency })
}

/// A random 24-bit starting PSN, so that a stale packet of an earlier run is not accepted.
pub fn initial_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    (nanos ^ std::process::id().rotate_left(12)) & 0xff_ffff
}

/// Tests only: an endpoint as a peer would send it, told apart by its queue pair number.
#[cfg(test)]
pub(super) fn test_endpoint(qp_num: u32) -> Endpoint {
    Endpoint {
        qp_num,
        psn: 5,
        lid: 0,
        gid: [0xfe; 16],
        rkey: 9,
        addr: 0x1000,
        len: 65536,
        mtu: 3,
    }
}
