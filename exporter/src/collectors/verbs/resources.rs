//! Owned verbs objects. Each releases its object in `Drop` and holds its parent (`Rc`), so
//! release order is right on every path: QP, then CQ and MR, then PD, then the device context.
//! A probe creates and drops everything on one thread, hence `Rc`.

use std::ffi::{c_int, CStr};
use std::rc::Rc;
use std::sync::Arc;

use super::ffi::{self, Verbs};
use super::ProbeError;

/// The errno of a failed call that returns NULL.
fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn check(call: &'static str, rc: c_int) -> Result<(), ProbeError> {
    match rc {
        0 => Ok(()),
        // verbs calls return an errno, or -1 with errno set.
        -1 => Err(ProbeError::Call {
            call,
            errno: last_errno(),
        }),
        errno => Err(ProbeError::Call {
            call,
            errno: errno.abs(),
        }),
    }
}

fn non_null<T>(call: &'static str, ptr: *mut T) -> Result<*mut T, ProbeError> {
    if ptr.is_null() {
        Err(ProbeError::Call {
            call,
            errno: last_errno(),
        })
    } else {
        Ok(ptr)
    }
}

/// The names of the devices `ibv_get_device_list` returns: those libibverbs has a provider
/// for, as an application started now sees them.
///
/// `ENOSYS` ("no kernel support for RDMA", `ibv_get_device_list(3)`: ib_uverbs not loaded)
/// lists none.
pub fn device_names(verbs: &Verbs) -> Result<Vec<String>, ProbeError> {
    let listed = with_device_list(verbs, |devices| {
        let names = devices
            .iter()
            .filter_map(|device| device_name(verbs, device));
        names
            .map(|name| name.to_string_lossy().into_owned())
            .collect()
    });
    match listed {
        Err(ProbeError::Call { errno, .. }) if errno == libc::ENOSYS => Ok(Vec::new()),
        listed => listed,
    }
}

/// Runs `read` on the device list, freed afterwards on every path.
fn with_device_list<R>(
    verbs: &Verbs,
    read: impl FnOnce(&[*mut ffi::Device]) -> R,
) -> Result<R, ProbeError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a live out-parameter.
    let list = non_null("ibv_get_device_list", unsafe {
        (verbs.get_device_list)(&mut count)
    })?;
    // SAFETY: a non-NULL list holds `count` device pointers (a negative count reads as none);
    // the slice is last used before the list is freed.
    let devices = unsafe { std::slice::from_raw_parts(list, usize::try_from(count).unwrap_or(0)) };
    let read = read(devices);
    // SAFETY: `list` came from ibv_get_device_list, is freed once, and `devices` is not used
    // after this.
    unsafe { (verbs.free_device_list)(list) };
    Ok(read)
}

/// A listed device's name, none if libibverbs gives none.
/// The name borrows the list entry, so it cannot outlive the list.
fn device_name<'l>(verbs: &Verbs, device: &'l *mut ffi::Device) -> Option<&'l CStr> {
    // SAFETY: `device` comes from a list `with_device_list` keeps live while its caller reads.
    let name = unsafe { (verbs.get_device_name)(*device) };
    // SAFETY: a non-NULL name is the NUL-terminated string the device owns, read while the
    // list keeps the device alive (the callers copy it before the list is freed).
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
}

/// An open device (`ibv_open_device`).
pub struct Device {
    pub verbs: Arc<Verbs>,
    context: *mut ffi::Context,
}

impl Device {
    /// Opens the device named `name` (as in /sys/class/infiniband).
    pub fn open(verbs: Arc<Verbs>, name: &str) -> Result<Rc<Device>, ProbeError> {
        let opened = with_device_list(&verbs, |devices| {
            let found = devices.iter().copied().find(|&device| {
                device_name(&verbs, &device).is_some_and(|n| n.to_bytes() == name.as_bytes())
            });
            // SAFETY: `device` comes from the list, which is live while this runs; an open
            // context does not need the list once it is freed.
            let context = found.map(|device| unsafe { (verbs.open_device)(device) });
            (context, last_errno())
        })?;
        match opened {
            (None, _) => Err(ProbeError::NoSuchDevice(name.to_string())),
            (Some(context), errno) if context.is_null() => Err(ProbeError::Call {
                call: "ibv_open_device",
                errno,
            }),
            (Some(context), _) => Ok(Rc::new(Device { verbs, context })),
        }
    }

    pub fn query_port(&self, port: u8) -> Result<ffi::PortAttr, ProbeError> {
        let mut attr = ffi::PortAttr::default();
        // SAFETY: the context is live while `self` is; `attr` is larger than what
        // ibv_query_port@@IBVERBS_1.1 writes (its prefix is checked by exporter/tests/it/verbs.rs).
        check("ibv_query_port", unsafe {
            (self.verbs.query_port)(self.context, port, &mut attr)
        })?;
        Ok(attr)
    }

    pub fn query_gid(&self, port: u8, index: u8) -> Result<ffi::Gid, ProbeError> {
        let mut gid = ffi::Gid::default();
        // SAFETY: the context is live while `self` is; `Gid` has the size of `union ibv_gid`
        // (checked by exporter/tests/it/verbs.rs), which is all ibv_query_gid writes.
        check("ibv_query_gid", unsafe {
            (self.verbs.query_gid)(self.context, port, c_int::from(index), &mut gid)
        })?;
        Ok(gid)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the context came from ibv_open_device and is closed once; every object
        // created on it holds an `Rc<Device>`, so none is left.
        unsafe { (self.verbs.close_device)(self.context) };
    }
}

pub struct ProtectionDomain {
    device: Rc<Device>,
    pd: *mut ffi::Pd,
}

impl ProtectionDomain {
    pub fn new(device: &Rc<Device>) -> Result<Rc<ProtectionDomain>, ProbeError> {
        // SAFETY: the context is live while `device` is.
        let pd = non_null("ibv_alloc_pd", unsafe {
            (device.verbs.alloc_pd)(device.context)
        })?;
        Ok(Rc::new(ProtectionDomain {
            device: device.clone(),
            pd,
        }))
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: the PD came from ibv_alloc_pd and is freed once; every QP and MR in it holds
        // an `Rc<ProtectionDomain>`, so none is left.
        unsafe { (self.device.verbs.dealloc_pd)(self.pd) };
    }
}

/// Page-aligned zeroed memory, the probe's own: never anything else's.
struct PageBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl PageBuffer {
    fn new(len: usize) -> Result<PageBuffer, ProbeError> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096)
            .map_err(|_| ProbeError::Invalid("buffer size"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(ProbeError::Invalid("buffer allocation failed"));
        }
        Ok(PageBuffer { ptr, layout })
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated in `new` with this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// A dedicated buffer registered for local and remote write (`ibv_reg_mr`).
pub struct RegisteredBuffer {
    pd: Rc<ProtectionDomain>,
    mr: *mut ffi::Mr,
    // Fields drop after `Drop::drop`: the region is deregistered before its memory is freed.
    memory: PageBuffer,
}

impl RegisteredBuffer {
    pub fn new(pd: &Rc<ProtectionDomain>, len: usize) -> Result<RegisteredBuffer, ProbeError> {
        let memory = PageBuffer::new(len)?;
        let access = (ffi::ACCESS_LOCAL_WRITE | ffi::ACCESS_REMOTE_WRITE) as c_int;
        // SAFETY: the PD is live while `pd` is; `memory` holds at least `len` bytes and is
        // freed only after the region is deregistered (see the field order below).
        let mr = non_null("ibv_reg_mr", unsafe {
            (pd.device.verbs.reg_mr)(pd.pd, memory.ptr.cast(), len, access)
        })?;
        Ok(RegisteredBuffer {
            pd: pd.clone(),
            mr,
            memory,
        })
    }

    pub fn addr(&self) -> u64 {
        self.memory.ptr as u64
    }

    fn size(&self) -> usize {
        self.memory.layout.size()
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is the live region from ibv_reg_mr; `Mr` mirrors the start of
        // `struct ibv_mr` (offsets checked by exporter/tests/it/verbs.rs).
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as in `lkey`.
        unsafe { (*self.mr).rkey }
    }

    /// Reads one byte that the HCA may write at any time.
    pub fn read_byte(&self, offset: usize) -> u8 {
        assert!(offset < self.size());
        // SAFETY: the offset is inside the buffer (asserted above). No Rust reference to the
        // buffer exists, so the HCA writing it concurrently invalidates none; the read is
        // volatile so that it is not hoisted out of a polling loop.
        unsafe { std::ptr::read_volatile(self.memory.ptr.add(offset)) }
    }

    pub fn fill(&self, offset: usize, len: usize, value: u8) {
        assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= self.size()));
        // SAFETY: the range is inside the buffer (asserted above), which is only ever accessed
        // through raw pointers.
        unsafe { std::ptr::write_bytes(self.memory.ptr.add(offset), value, len) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for RegisteredBuffer {
    fn drop(&mut self) {
        // SAFETY: the region came from ibv_reg_mr and is deregistered once, before its memory
        // is freed (fields drop after this).
        unsafe { (self.pd.device.verbs.dereg_mr)(self.mr) };
    }
}

pub struct CompletionQueue {
    device: Rc<Device>,
    cq: *mut ffi::Cq,
}

impl CompletionQueue {
    pub fn new(device: &Rc<Device>, entries: u32) -> Result<Rc<CompletionQueue>, ProbeError> {
        let entries = c_int::try_from(entries).map_err(|_| ProbeError::Invalid("queue depth"))?;
        // SAFETY: the context is live while `device` is; no completion channel or context.
        let cq = non_null("ibv_create_cq", unsafe {
            (device.verbs.create_cq)(
                device.context,
                entries,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        })?;
        Ok(Rc::new(CompletionQueue {
            device: device.clone(),
            cq,
        }))
    }

    /// Polls up to `wc.len()` completions; each must have succeeded.
    pub fn poll(&self, wc: &mut [ffi::Wc]) -> Result<usize, ProbeError> {
        let entries = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: the CQ is live while `self` is, and `wc` has room for `entries` completions
        // (`Wc` has the size of `struct ibv_wc`, checked by exporter/tests/it/verbs.rs).
        let n = unsafe { ffi::poll_cq(self.cq, entries, wc.as_mut_ptr()) };
        let n = usize::try_from(n).map_err(|_| ProbeError::Call {
            call: "ibv_poll_cq",
            errno: n.abs(),
        })?;
        match wc[..n].iter().find(|c| c.status != ffi::WC_SUCCESS) {
            Some(failed) => Err(ProbeError::Completion(failed.status)),
            None => Ok(n),
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: the CQ came from ibv_create_cq and is destroyed once; every QP using it holds
        // an `Rc<CompletionQueue>`, so none is left.
        unsafe { (self.device.verbs.destroy_cq)(self.cq) };
    }
}

/// An RC queue pair whose send and receive completions go to one CQ.
pub struct QueuePair {
    pd: Rc<ProtectionDomain>,
    pub cq: Rc<CompletionQueue>,
    qp: *mut ffi::Qp,
}

impl QueuePair {
    pub fn new(
        pd: &Rc<ProtectionDomain>,
        cq: &Rc<CompletionQueue>,
        send_depth: u32,
    ) -> Result<QueuePair, ProbeError> {
        let mut init = ffi::QpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.cq,
            recv_cq: cq.cq,
            srq: std::ptr::null_mut(),
            cap: ffi::QpCap {
                max_send_wr: send_depth,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the PD and CQ are live while `pd` and `cq` are; `init` is a whole
        // `struct ibv_qp_init_attr` (size checked by exporter/tests/it/verbs.rs). This relies on `pd` and
        // `cq` being on one device: the callers of `engine::Side::new` make the PD on the
        // device they pass it.
        let qp = non_null("ibv_create_qp", unsafe {
            (pd.device.verbs.create_qp)(pd.pd, &mut init)
        })?;
        Ok(QueuePair {
            pd: pd.clone(),
            cq: cq.clone(),
            qp,
        })
    }

    pub fn qp_num(&self) -> u32 {
        // SAFETY: `qp` is the live QP from ibv_create_qp; `Qp` mirrors the start of
        // `struct ibv_qp` (offsets checked by exporter/tests/it/verbs.rs).
        unsafe { (*self.qp).qp_num }
    }

    pub fn modify(&self, attr: &mut ffi::QpAttr, mask: c_int) -> Result<(), ProbeError> {
        // SAFETY: the QP is live while `self` is; `attr` is a whole `struct ibv_qp_attr` (size
        // checked by exporter/tests/it/verbs.rs).
        check("ibv_modify_qp", unsafe {
            (self.pd.device.verbs.modify_qp)(self.qp, attr, mask)
        })
    }

    pub fn post_write(&self, wr: &mut ffi::SendWr) -> Result<(), ProbeError> {
        // SAFETY: the QP is live while `self` is. This relies on `wr.sg_list` pointing at an
        // `Sge` that lives for the call and names a registered buffer that outlives the
        // write, as `engine::Side::post_write` builds it from its own `RegisteredBuffer`.
        check("ibv_post_send", unsafe { ffi::post_send(self.qp, wr) })
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: the QP came from ibv_create_qp and is destroyed once, before the CQ, PD and
        // buffers it used (it holds their `Rc`s; `engine::Side` drops its QP before its buffer).
        unsafe { (self.pd.device.verbs.destroy_qp)(self.qp) };
    }
}
