//! The few libibverbs calls the probe needs, loaded at run time from `libibverbs.so.1` (as NCCL's
//! `ibvwrap` does), so that the binary builds and runs where rdma-core is absent.
//!
//! Layouts mirror rdma-core's `infiniband/verbs.h` (stable ABI `IBVERBS_1.1`). Only the fields the
//! probe reads or writes are named; the rest is padding of the exact size. `exporter/tests/it/verbs.rs`
//! compiles a C program against the real header and checks every offset and size in
//! [`ABI_LAYOUT`] against it.
//!
//! `ibv_post_send` and `ibv_poll_cq` are `static inline` in `verbs.h`: they are
//! not exported and call through the provider's ops table in `struct ibv_context`
//! (`qp->context->ops.post_send`). [`post_send`] and [`poll_cq`] do the same.
//!
//! `ibv_query_port` in `verbs.h` is a macro for an inline wrapper that tries the extended
//! `verbs_context` first; the exported symbol `ibv_query_port@@IBVERBS_1.1` takes
//! `struct _compat_ibv_port_attr` (the stable prefix of `ibv_port_attr`) and fills exactly that,
//! through a temporary of its own. [`PortAttr`] is that prefix plus spare room.

use std::ffi::{c_char, c_int, c_void};
use std::mem::offset_of;

use crate::dynlib::Library;
pub use crate::dynlib::LoadError;

/// The soname rdma-core has shipped since 2016 (`libibverbs.so.1`, ABI 1.1).
pub const LIBRARY: &str = "libibverbs.so.1";

#[repr(C)]
pub struct Device {
    _opaque: [u8; 0],
}

/// `struct ibv_context_ops`: 32 function pointers; the three the inline verbs use are named.
#[repr(C)]
pub struct ContextOps {
    /// `_compat_query_device` .. `_compat_create_cq`.
    _before_poll_cq: [usize; 11],
    pub poll_cq: Option<unsafe extern "C" fn(*mut Cq, c_int, *mut Wc) -> c_int>,
    /// `req_notify_cq` .. `_compat_destroy_qp`.
    _before_post_send: [usize; 13],
    pub post_send: Option<unsafe extern "C" fn(*mut Qp, *mut SendWr, *mut *mut SendWr) -> c_int>,
    /// `post_recv` (unused: the probe only writes) .. `_compat_async_event`.
    _after_post_send: [usize; 6],
}

/// `struct ibv_context`, up to `num_comp_vectors` (the mutex after it is never touched here,
/// and the library allocates the struct).
#[repr(C)]
pub struct Context {
    pub device: *mut Device,
    pub ops: ContextOps,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
}

#[repr(C)]
pub struct Pd {
    pub context: *mut Context,
    pub handle: u32,
}

#[repr(C)]
pub struct Mr {
    pub context: *mut Context,
    pub pd: *mut Pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_cq`, up to `cq_context` (allocated by the library).
#[repr(C)]
pub struct Cq {
    pub context: *mut Context,
    pub channel: *mut c_void,
    pub cq_context: *mut c_void,
}

/// `struct ibv_qp`, up to `qp_num` (allocated by the library).
#[repr(C)]
pub struct Qp {
    pub context: *mut Context,
    pub qp_context: *mut c_void,
    pub pd: *mut Pd,
    pub send_cq: *mut Cq,
    pub recv_cq: *mut Cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

/// `union ibv_gid` (8-byte aligned by its `global` member of two `__be64`).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gid {
    pub raw: [u8; 16],
}

/// `struct _compat_ibv_port_attr` (what `ibv_query_port@@IBVERBS_1.1` writes), with spare room
/// so that a library writing the whole `struct ibv_port_attr` cannot overrun it.
#[repr(C)]
pub struct PortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    _spare: [u64; 10],
}

impl Default for PortAttr {
    fn default() -> Self {
        // SAFETY: every field is an integer or an integer array; all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
pub struct QpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut Cq,
    pub recv_cq: *mut Cq,
    pub srq: *mut c_void,
    pub cap: QpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalRoute {
    pub dgid: Gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AhAttr {
    pub grh: GlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` with its `wr` union seen as `wr.rdma`.
#[repr(C)]
pub struct SendWr {
    pub wr_id: u64,
    pub next: *mut SendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    /// The rest of the `wr` union (its `atomic` member is the largest), the `qp_type` union,
    /// and the `bind_mw`/`tso` union.
    _rest: [u32; 5],
    _qp_type: u32,
    _bind_mw_or_tso: [u64; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

impl SendWr {
    /// An RDMA WRITE of one local buffer to a remote address.
    pub fn rdma_write(wr_id: u64, sge: *mut Sge, remote_addr: u64, rkey: u32, flags: u32) -> Self {
        SendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sge,
            num_sge: 1,
            opcode: WR_RDMA_WRITE,
            send_flags: flags,
            imm_data: 0,
            remote_addr,
            rkey,
            _rest: [0; 5],
            _qp_type: 0,
            _bind_mw_or_tso: [0; 6],
        }
    }
}

// Enum values from verbs.h.
pub const PORT_ACTIVE: u32 = 4;
pub const LINK_LAYER_INFINIBAND: u8 = 1;
pub const LINK_LAYER_ETHERNET: u8 = 2;
pub const QPT_RC: u32 = 2;
pub const QPS_INIT: u32 = 1;
pub const QPS_RTR: u32 = 2;
pub const QPS_RTS: u32 = 3;
pub const ACCESS_LOCAL_WRITE: u32 = 1;
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const WR_RDMA_WRITE: u32 = 0;
pub const SEND_SIGNALED: u32 = 1 << 1;
pub const WC_SUCCESS: u32 = 0;
pub const QP_STATE: c_int = 1 << 0;
pub const QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const QP_PKEY_INDEX: c_int = 1 << 4;
pub const QP_PORT: c_int = 1 << 5;
pub const QP_AV: c_int = 1 << 7;
pub const QP_PATH_MTU: c_int = 1 << 8;
pub const QP_TIMEOUT: c_int = 1 << 9;
pub const QP_RETRY_CNT: c_int = 1 << 10;
pub const QP_RNR_RETRY: c_int = 1 << 11;
pub const QP_RQ_PSN: c_int = 1 << 12;
pub const QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const QP_SQ_PSN: c_int = 1 << 16;
pub const QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const QP_DEST_QPN: c_int = 1 << 20;

/// Every offset, size and constant the binding relies on, as `(C expression, value)`;
/// `exporter/tests/it/verbs.rs` evaluates each expression against the real `verbs.h`.
pub const ABI_LAYOUT: &[(&str, usize)] = &[
    (
        "offsetof(struct ibv_context, ops.poll_cq)",
        offset_of!(Context, ops.poll_cq),
    ),
    (
        "offsetof(struct ibv_context, ops.post_send)",
        offset_of!(Context, ops.post_send),
    ),
    ("sizeof(struct ibv_context_ops)", size_of::<ContextOps>()),
    (
        "offsetof(struct ibv_context, num_comp_vectors)",
        offset_of!(Context, num_comp_vectors),
    ),
    ("offsetof(struct ibv_pd, context)", offset_of!(Pd, context)),
    ("offsetof(struct ibv_mr, lkey)", offset_of!(Mr, lkey)),
    ("offsetof(struct ibv_mr, rkey)", offset_of!(Mr, rkey)),
    ("offsetof(struct ibv_cq, context)", offset_of!(Cq, context)),
    (
        "offsetof(struct ibv_cq, cq_context)",
        offset_of!(Cq, cq_context),
    ),
    ("offsetof(struct ibv_qp, context)", offset_of!(Qp, context)),
    ("offsetof(struct ibv_qp, qp_num)", offset_of!(Qp, qp_num)),
    ("sizeof(union ibv_gid)", size_of::<Gid>()),
    (
        "offsetof(struct ibv_port_attr, active_mtu)",
        offset_of!(PortAttr, active_mtu),
    ),
    (
        "offsetof(struct ibv_port_attr, gid_tbl_len)",
        offset_of!(PortAttr, gid_tbl_len),
    ),
    (
        "offsetof(struct ibv_port_attr, lid)",
        offset_of!(PortAttr, lid),
    ),
    (
        "offsetof(struct ibv_port_attr, active_width)",
        offset_of!(PortAttr, active_width),
    ),
    (
        "offsetof(struct ibv_port_attr, phys_state)",
        offset_of!(PortAttr, phys_state),
    ),
    (
        "offsetof(struct ibv_port_attr, link_layer)",
        offset_of!(PortAttr, link_layer),
    ),
    (
        "offsetof(struct ibv_port_attr, flags)",
        offset_of!(PortAttr, flags),
    ),
    (
        "offsetof(struct ibv_qp_init_attr, cap.max_inline_data)",
        offset_of!(QpInitAttr, cap.max_inline_data),
    ),
    (
        "offsetof(struct ibv_qp_init_attr, qp_type)",
        offset_of!(QpInitAttr, qp_type),
    ),
    (
        "offsetof(struct ibv_qp_init_attr, sq_sig_all)",
        offset_of!(QpInitAttr, sq_sig_all),
    ),
    ("sizeof(struct ibv_qp_init_attr)", size_of::<QpInitAttr>()),
    (
        "offsetof(struct ibv_qp_attr, qp_access_flags)",
        offset_of!(QpAttr, qp_access_flags),
    ),
    (
        "offsetof(struct ibv_qp_attr, ah_attr.grh.dgid)",
        offset_of!(QpAttr, ah_attr.grh.dgid),
    ),
    (
        "offsetof(struct ibv_qp_attr, ah_attr.grh.sgid_index)",
        offset_of!(QpAttr, ah_attr.grh.sgid_index),
    ),
    (
        "offsetof(struct ibv_qp_attr, ah_attr.grh.hop_limit)",
        offset_of!(QpAttr, ah_attr.grh.hop_limit),
    ),
    (
        "offsetof(struct ibv_qp_attr, ah_attr.dlid)",
        offset_of!(QpAttr, ah_attr.dlid),
    ),
    (
        "offsetof(struct ibv_qp_attr, ah_attr.is_global)",
        offset_of!(QpAttr, ah_attr.is_global),
    ),
    (
        "offsetof(struct ibv_qp_attr, ah_attr.port_num)",
        offset_of!(QpAttr, ah_attr.port_num),
    ),
    (
        "offsetof(struct ibv_qp_attr, alt_ah_attr)",
        offset_of!(QpAttr, alt_ah_attr),
    ),
    (
        "offsetof(struct ibv_qp_attr, pkey_index)",
        offset_of!(QpAttr, pkey_index),
    ),
    (
        "offsetof(struct ibv_qp_attr, max_dest_rd_atomic)",
        offset_of!(QpAttr, max_dest_rd_atomic),
    ),
    (
        "offsetof(struct ibv_qp_attr, min_rnr_timer)",
        offset_of!(QpAttr, min_rnr_timer),
    ),
    (
        "offsetof(struct ibv_qp_attr, port_num)",
        offset_of!(QpAttr, port_num),
    ),
    (
        "offsetof(struct ibv_qp_attr, rnr_retry)",
        offset_of!(QpAttr, rnr_retry),
    ),
    (
        "offsetof(struct ibv_qp_attr, rate_limit)",
        offset_of!(QpAttr, rate_limit),
    ),
    ("sizeof(struct ibv_qp_attr)", size_of::<QpAttr>()),
    ("sizeof(struct ibv_sge)", size_of::<Sge>()),
    (
        "offsetof(struct ibv_send_wr, opcode)",
        offset_of!(SendWr, opcode),
    ),
    (
        "offsetof(struct ibv_send_wr, send_flags)",
        offset_of!(SendWr, send_flags),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.rdma.remote_addr)",
        offset_of!(SendWr, remote_addr),
    ),
    (
        "offsetof(struct ibv_send_wr, wr.rdma.rkey)",
        offset_of!(SendWr, rkey),
    ),
    ("sizeof(struct ibv_send_wr)", size_of::<SendWr>()),
    ("offsetof(struct ibv_wc, status)", offset_of!(Wc, status)),
    (
        "offsetof(struct ibv_wc, byte_len)",
        offset_of!(Wc, byte_len),
    ),
    ("offsetof(struct ibv_wc, qp_num)", offset_of!(Wc, qp_num)),
    ("sizeof(struct ibv_wc)", size_of::<Wc>()),
    ("IBV_PORT_ACTIVE", PORT_ACTIVE as usize),
    ("IBV_LINK_LAYER_INFINIBAND", LINK_LAYER_INFINIBAND as usize),
    ("IBV_LINK_LAYER_ETHERNET", LINK_LAYER_ETHERNET as usize),
    ("IBV_QPT_RC", QPT_RC as usize),
    ("IBV_QPS_INIT", QPS_INIT as usize),
    ("IBV_QPS_RTR", QPS_RTR as usize),
    ("IBV_QPS_RTS", QPS_RTS as usize),
    ("IBV_ACCESS_LOCAL_WRITE", ACCESS_LOCAL_WRITE as usize),
    ("IBV_ACCESS_REMOTE_WRITE", ACCESS_REMOTE_WRITE as usize),
    ("IBV_WR_RDMA_WRITE", WR_RDMA_WRITE as usize),
    ("IBV_SEND_SIGNALED", SEND_SIGNALED as usize),
    ("IBV_WC_SUCCESS", WC_SUCCESS as usize),
    ("IBV_QP_STATE", QP_STATE as usize),
    ("IBV_QP_ACCESS_FLAGS", QP_ACCESS_FLAGS as usize),
    ("IBV_QP_PKEY_INDEX", QP_PKEY_INDEX as usize),
    ("IBV_QP_PORT", QP_PORT as usize),
    ("IBV_QP_AV", QP_AV as usize),
    ("IBV_QP_PATH_MTU", QP_PATH_MTU as usize),
    ("IBV_QP_TIMEOUT", QP_TIMEOUT as usize),
    ("IBV_QP_RETRY_CNT", QP_RETRY_CNT as usize),
    ("IBV_QP_RNR_RETRY", QP_RNR_RETRY as usize),
    ("IBV_QP_RQ_PSN", QP_RQ_PSN as usize),
    ("IBV_QP_MAX_QP_RD_ATOMIC", QP_MAX_QP_RD_ATOMIC as usize),
    ("IBV_QP_MIN_RNR_TIMER", QP_MIN_RNR_TIMER as usize),
    ("IBV_QP_SQ_PSN", QP_SQ_PSN as usize),
    ("IBV_QP_MAX_DEST_RD_ATOMIC", QP_MAX_DEST_RD_ATOMIC as usize),
    ("IBV_QP_DEST_QPN", QP_DEST_QPN as usize),
];

/// The exported entry points, resolved once from the loaded library.
pub struct Verbs {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut Device,
    pub free_device_list: unsafe extern "C" fn(*mut *mut Device),
    pub get_device_name: unsafe extern "C" fn(*mut Device) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut Device) -> *mut Context,
    pub close_device: unsafe extern "C" fn(*mut Context) -> c_int,
    pub query_port: unsafe extern "C" fn(*mut Context, u8, *mut PortAttr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut Context, u8, c_int, *mut Gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut Context) -> *mut Pd,
    pub dealloc_pd: unsafe extern "C" fn(*mut Pd) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut Pd, *mut c_void, usize, c_int) -> *mut Mr,
    pub dereg_mr: unsafe extern "C" fn(*mut Mr) -> c_int,
    pub create_cq:
        unsafe extern "C" fn(*mut Context, c_int, *mut c_void, *mut c_void, c_int) -> *mut Cq,
    pub destroy_cq: unsafe extern "C" fn(*mut Cq) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut Pd, *mut QpInitAttr) -> *mut Qp,
    pub modify_qp: unsafe extern "C" fn(*mut Qp, *mut QpAttr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut Qp) -> c_int,
    /// Keeps the function pointers above valid; never unloaded before them.
    _library: Library,
}

impl Verbs {
    /// Loads `library`: a path, or a soname such as [`LIBRARY`] that the dynamic linker finds.
    pub fn load(library: &str) -> Result<Verbs, LoadError> {
        // SAFETY: loading runs the library's initialisers; libibverbs' only read its config
        // directory and sysfs. This relies on `library` being libibverbs (the default, or
        // what the operator's flag names).
        let loaded = unsafe { Library::open(library) }?;
        Verbs::resolve(loaded)
    }

    /// The path the dynamic linker loaded libibverbs from.
    pub fn loaded_from(&self) -> Option<std::path::PathBuf> {
        crate::dynlib::loaded_from(self.get_device_list as usize)
    }

    fn resolve(library: Library) -> Result<Verbs, LoadError> {
        // SAFETY: each symbol is taken as the function type verbs.h declares for it (the type of
        // the field it initialises), and the library outlives the pointers (both live in `Verbs`).
        unsafe {
            Ok(Verbs {
                get_device_list: library.function("ibv_get_device_list")?,
                free_device_list: library.function("ibv_free_device_list")?,
                get_device_name: library.function("ibv_get_device_name")?,
                open_device: library.function("ibv_open_device")?,
                close_device: library.function("ibv_close_device")?,
                query_port: library.function("ibv_query_port")?,
                query_gid: library.function("ibv_query_gid")?,
                alloc_pd: library.function("ibv_alloc_pd")?,
                dealloc_pd: library.function("ibv_dealloc_pd")?,
                reg_mr: library.function("ibv_reg_mr")?,
                dereg_mr: library.function("ibv_dereg_mr")?,
                create_cq: library.function("ibv_create_cq")?,
                destroy_cq: library.function("ibv_destroy_cq")?,
                create_qp: library.function("ibv_create_qp")?,
                modify_qp: library.function("ibv_modify_qp")?,
                destroy_qp: library.function("ibv_destroy_qp")?,
                _library: library,
            })
        }
    }
}

/// `ibv_post_send`: through the QP's context ops, as the inline in verbs.h does.
///
/// # Safety
/// `qp` is a live QP from `ibv_create_qp`; `wr` and what it points to stay valid for the call.
pub unsafe fn post_send(qp: *mut Qp, wr: *mut SendWr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: the caller passes a live QP, whose `context` is the live context it was created
    // on; `Qp` and `Context` mirror verbs.h up to the fields read (checked by exporter/tests/it/verbs.rs).
    let post_send = unsafe { (*(*qp).context).ops.post_send };
    match post_send {
        // SAFETY: the provider's own post_send, given the caller's live QP and valid `wr`.
        Some(post) => unsafe { post(qp, wr, &mut bad) },
        None => libc::ENOSYS,
    }
}

/// `ibv_poll_cq`: through the CQ's context ops. Returns the number of completions, or < 0.
///
/// # Safety
/// `cq` is a live CQ from `ibv_create_cq`; `wc` has room for `entries` completions.
pub unsafe fn poll_cq(cq: *mut Cq, entries: c_int, wc: *mut Wc) -> c_int {
    // SAFETY: the caller passes a live CQ, whose `context` is the live context it was created
    // on; `Cq` and `Context` mirror verbs.h up to the fields read (checked by exporter/tests/it/verbs.rs).
    let poll_cq = unsafe { (*(*cq).context).ops.poll_cq };
    match poll_cq {
        // SAFETY: the provider's own poll_cq, given the caller's live CQ and room for
        // `entries` completions in `wc`.
        Some(poll) => unsafe { poll(cq, entries, wc) },
        None => -libc::ENOSYS,
    }
}
