//! Health reporters of RDMA devices' devlink instances: every instance's reporters in one
//! devlink dump per scrape (`netlink/devlink/`, cheap: the kernel's counts, no firmware),
//! each exported under the RDMA device whose parent is the instance's PCI function (handle
//! `pci/<address>`, the `pci_address` of `hpcnode_rdma_device_info`). A port's reporter (mlx5's
//! `tx` and `rx` on kernels that register them on the devlink port) carries the devlink port
//! index as `devlink_port`, "" for the instance's own: a devlink port index is not an RDMA
//! port number (docs/rdma.md, "Devlink health reporters"). A kernel without devlink (no
//! family, `ENOENT`) or a node without instances exports nothing, without error. Only the
//! running kernel answers: the collector asks when `--path.sysfs` is `/sys`.

use std::collections::HashMap;
use std::time::Instant;

use crate::collector::Output;
use crate::error::CollectError;
use crate::metrics::Desc;
use crate::metrics::{LabelValue, Value};
use crate::netlink::devlink::socket::Socket;
use crate::netlink::devlink::Reporter;
use crate::netlink::generic::socket::ExchangeError;
use crate::netlink::generic::ReplyError;

pub(super) const ERRORS: Desc = Desc::counter(
    "hpcnode_rdma_device_health_reporter_errors",
    "Errors a devlink health reporter of the RDMA device's PCI function has reported since the driver made it.",
    None,
);
pub(super) const RECOVERIES: Desc = Desc::counter(
    "hpcnode_rdma_device_health_reporter_recoveries",
    "Recoveries a devlink health reporter of the RDMA device's PCI function has completed since the driver made it.",
    None,
);
pub(super) const HEALTHY: Desc = Desc::gauge(
    "hpcnode_rdma_device_health_reporter_healthy",
    "1 when the devlink health reporter's state is healthy, 0 when it is in error (not recovered).",
    None,
);

/// The devlink bus of the instances matched to RDMA devices.
const PCI_BUS: &str = "pci";

/// Every devlink instance's health reporters.
pub(super) trait HealthSource: Send + Sync {
    fn health_reporters(&self, deadline: Instant) -> Result<Vec<Reporter>, ExchangeError>;
}

/// The running kernel's answer, over a socket of its own each scrape (two round trips).
pub(super) struct DevlinkNetlink;

impl HealthSource for DevlinkNetlink {
    fn health_reporters(&self, deadline: Instant) -> Result<Vec<Reporter>, ExchangeError> {
        Socket::open(deadline)?.health_reporters(deadline)
    }
}

/// One scrape's reporters by PCI address, or why the dump failed.
pub(super) type HealthListing = Result<HashMap<String, Vec<Reporter>>, ExchangeError>;

/// The dump, by PCI address; a kernel without the devlink family has no reporters.
pub(super) fn list(source: &dyn HealthSource, deadline: Instant) -> HealthListing {
    let reporters = match source.health_reporters(deadline) {
        Err(ExchangeError::Reply(ReplyError::Kernel(libc::ENOENT))) => Vec::new(),
        other => other?,
    };
    let mut by_address: HashMap<String, Vec<Reporter>> = HashMap::new();
    for reporter in reporters.into_iter().filter(|r| r.bus == PCI_BUS) {
        by_address
            .entry(reporter.device.clone())
            .or_default()
            .push(reporter);
    }
    Ok(by_address)
}

/// The reporters of the instance at `pci_address`, under `device`; a failed dump is this
/// device's error.
pub(super) fn push(
    listing: &HealthListing,
    device: &LabelValue,
    pci_address: &str,
    out: &mut Output,
) {
    let reporters = match listing {
        Ok(by_address) => by_address.get(pci_address),
        Err(err) => {
            out.errors.push(dump_error(err));
            return;
        }
    };
    for reporter in reporters.into_iter().flatten() {
        let port = reporter.port.map(|port| port.to_string());
        let labels = [
            ("device", device.clone()),
            ("reporter", reporter.name.clone().into()),
            ("devlink_port", port.unwrap_or_default().into()),
        ];
        out.samples
            .push(&ERRORS, labels.clone(), Value::Int(reporter.errors));
        out.samples
            .push(&RECOVERIES, labels.clone(), Value::Int(reporter.recoveries));
        let healthy = u64::from(reporter.healthy);
        out.samples.push(&HEALTHY, labels, Value::Int(healthy));
    }
}

fn dump_error(err: &ExchangeError) -> CollectError {
    CollectError::new(err.kind(), format!("devlink health reporters: {err}"))
}

#[cfg(test)]
mod tests;
