//! The checks: one per alert of `alerts/*.rules.yml` that says a node is not fit for jobs and
//! that one look can settle (a gauge compared with a value or a threshold; an alert on an
//! `increase()` needs a history a single page has not got). Each judges a page as its alert
//! judges the series, with the same metrics, matchers and comparisons: those are declared once
//! here as [`Term`]s, which the judging code uses and which the unit tests find, written the
//! way PromQL writes them, in the alert's expression. A check has no `for:` duration: it fails
//! on the first page that shows the state, where its alert waits minutes.

use regex::Regex;

use crate::exposition::Sample;

/// A label matcher, as PromQL's `=`, `!=`, `=~` and `!~` (regular expressions anchored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    Equal,
    NotEqual,
    Regex,
    NotRegex,
}

/// A metric and at most one label matcher: what the checks select.
#[derive(Debug)]
pub struct Selector {
    pub metric: &'static str,
    pub label: Option<(&'static str, Match, &'static str)>,
}

/// A comparison operator of PromQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Gt => ">",
            Op::Lt => "<",
        }
    }

    /// PromQL's filter: whether a sample of `value` is kept (`NaN != x` is kept, as there).
    pub fn holds(self, value: f64, bound: f64) -> bool {
        match self {
            Op::Eq => value == bound,
            Op::Ne => value != bound,
            Op::Gt => value > bound,
            Op::Lt => value < bound,
        }
    }
}

/// What a comparison compares with.
#[derive(Debug, Clone, Copy)]
pub enum Bound {
    Value(f64),
    /// The check's threshold (`hpcnode:threshold{threshold="<name>"}` in the alert).
    Threshold,
}

/// `<selector> <op> <bound>`.
#[derive(Debug)]
pub struct Compare {
    pub selector: Selector,
    pub op: Op,
    pub bound: Bound,
}

impl Compare {
    /// Whether a sample of `value` (one the selector selected) passes, `threshold` standing
    /// for [`Bound::Threshold`].
    pub fn keeps(&self, value: f64, threshold: f64) -> bool {
        let bound = match self.bound {
            Bound::Value(value) => value,
            Bound::Threshold => threshold,
        };
        self.op.holds(value, bound)
    }
}

/// `<numerator> / ignoring (<label>) <denominator> <op> <threshold>`.
#[derive(Debug)]
pub struct Ratio {
    pub numerator: Selector,
    pub denominator: Selector,
    pub ignoring: &'static str,
    pub op: Op,
}

/// A piece of an alert's expression that its check judges by.
#[derive(Debug)]
pub enum Term {
    Compare(&'static Compare),
    Ratio(&'static Ratio),
    /// A series the alert joins for its labels.
    Series(&'static Selector),
}

/// A check's threshold: its name in `alerts/config.rules.yml` and the value there.
#[derive(Debug)]
pub struct Threshold {
    pub name: &'static str,
    pub default: f64,
}

/// One check.
#[derive(Debug)]
pub struct Check {
    /// As the output and the checks file name it.
    pub name: &'static str,
    /// The alert it mirrors, and its rule file under `alerts/`.
    pub alert: &'static str,
    pub rules: &'static str,
    /// The collector whose metrics it reads: a page where that collector failed cannot say the
    /// node is fine.
    pub collector: &'static str,
    pub enabled_by_default: bool,
    pub threshold: Option<Threshold>,
    pub terms: &'static [Term],
    /// The failures on `page`, with the threshold in force (unused by checks without one).
    pub judge: fn(page: &Page<'_>, threshold: f64) -> Vec<Finding>,
    /// Why `page` cannot settle the check yet, if it cannot: what it reads is still being
    /// read.
    pub pending: fn(page: &Page<'_>) -> Option<&'static str>,
}

/// For the checks whose page is settled once it is served.
fn settled(_: &Page<'_>) -> Option<&'static str> {
    None
}

/// One failure of a check: the device (`mlx5_0/1`, a module, a PCI address) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub device: String,
    pub reason: String,
}

/// The samples of one page.
pub struct Page<'a> {
    samples: &'a [Sample],
}

impl<'a> Page<'a> {
    pub fn new(samples: &'a [Sample]) -> Self {
        Page { samples }
    }

    /// The samples `selector` selects.
    pub fn select(&self, selector: &'a Selector) -> impl Iterator<Item = &'a Sample> + 'a {
        let label = selector.label.map(|(name, how, value)| {
            let regex = match how {
                Match::Regex | Match::NotRegex => Regex::new(&format!("^(?:{value})$")).ok(),
                Match::Equal | Match::NotEqual => None,
            };
            (name, how, value, regex)
        });
        self.samples.iter().filter(move |sample| {
            sample.name == selector.metric
                && label.as_ref().is_none_or(|(name, how, value, regex)| {
                    let found = sample.label(name);
                    match how {
                        Match::Equal => found == *value,
                        Match::NotEqual => found != *value,
                        Match::Regex => regex.as_ref().is_some_and(|r| r.is_match(found)),
                        Match::NotRegex => regex.as_ref().is_some_and(|r| !r.is_match(found)),
                    }
                })
        })
    }

    /// The samples `compare` keeps, `threshold` standing for [`Bound::Threshold`].
    pub fn matching(
        &self,
        compare: &'a Compare,
        threshold: f64,
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.select(&compare.selector)
            .filter(move |sample| compare.keeps(sample.value, threshold))
    }

    /// Whether any sample `compare` keeps has the same value as `sample` for each of `labels`.
    fn any_matching_on(&self, compare: &'a Compare, sample: &Sample, labels: &[&str]) -> bool {
        self.matching(compare, f64::NAN)
            .any(|other| labels.iter().all(|l| other.label(l) == sample.label(l)))
    }

    /// The largest value `selector` selects per value of `label` (PromQL's `max by`), in the
    /// order first seen.
    fn max_by(&self, selector: &'a Selector, label: &str) -> Vec<(&'a str, f64)> {
        let mut max: Vec<(&'a str, f64)> = Vec::new();
        for sample in self.select(selector) {
            let key = sample.label(label);
            match max.iter_mut().find(|(known, _)| *known == key) {
                // PromQL's max keeps a number over NaN.
                Some((_, value)) if value.is_nan() || sample.value > *value => {
                    *value = sample.value
                }
                Some(_) => {}
                None => max.push((key, sample.value)),
            }
        }
        max
    }
}

/// The checks, in the order their failures are printed.
pub const ALL: [Check; 13] = [
    MODULE_EXPECTED,
    MODULE_FILE_REFUSED,
    MODULE_REFUSED_BEFORE_START,
    RDMA_PORT_STATE,
    RDMA_PORT_PHYSICAL_STATE,
    RDMA_HEALTH_REPORTER,
    RDMA_PROVIDER,
    RDMA_VERBS_VISIBLE,
    PCI_DRIVER,
    PCI_PASSTHROUGH,
    PCI_LINK_WIDTH,
    MIC_CARD_STATE,
    MIC_DIE_TEMPERATURE,
];

const fn metric(metric: &'static str) -> Selector {
    Selector {
        metric,
        label: None,
    }
}

const fn labelled(
    metric: &'static str,
    label: &'static str,
    how: Match,
    value: &'static str,
) -> Selector {
    Selector {
        metric,
        label: Some((label, how, value)),
    }
}

const fn compare(selector: Selector, op: Op, value: f64) -> Compare {
    Compare {
        selector,
        op,
        bound: Bound::Value(value),
    }
}

/// The findings of every sample `compare` keeps, each named and explained by `finding`.
fn each(
    page: &Page<'_>,
    compare: &'static Compare,
    threshold: f64,
    finding: impl Fn(&Sample) -> Finding,
) -> Vec<Finding> {
    page.matching(compare, threshold).map(finding).collect()
}

fn finding(device: impl Into<String>, reason: impl Into<String>) -> Finding {
    Finding {
        device: device.into(),
        reason: reason.into(),
    }
}

/// `device/port`, as `ibstat` and the alerts' summaries name a port.
fn port(sample: &Sample) -> String {
    format!("{}/{}", sample.label("device"), sample.label("port"))
}

static EXPECTED_NOT_LOADED: Compare =
    compare(metric("hpcnode_module_expected_loaded"), Op::Eq, 0.0);

const MODULE_EXPECTED: Check = Check {
    name: "module_expected",
    alert: "HpcnodeModuleExpectedMissing",
    rules: "modules.rules.yml",
    collector: "modules",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&EXPECTED_NOT_LOADED)],
    pending: settled,
    judge: |page, threshold| {
        each(page, &EXPECTED_NOT_LOADED, threshold, |sample| {
            finding(
                sample.label("module"),
                "expected module not loaded (neither Live nor built in)",
            )
        })
    },
};

static FILE_UNSIGNED: Compare = compare(metric("hpcnode_module_file_signed"), Op::Eq, 0.0);
static FILE_SIGNER_UNTRUSTED: Compare = compare(
    labelled(
        "hpcnode_module_file_signer_trust",
        "state",
        Match::Equal,
        "untrusted",
    ),
    Op::Eq,
    1.0,
);
static SIGNATURES_ENFORCED: Compare = compare(metric("hpcnode_module_sig_enforce"), Op::Eq, 1.0);
static LOCKED_DOWN: Compare = compare(
    labelled(
        "hpcnode_kernel_lockdown_mode",
        "mode",
        Match::NotEqual,
        "none",
    ),
    Op::Eq,
    1.0,
);

const MODULE_FILE_REFUSED: Check = Check {
    name: "module_file_refused",
    alert: "HpcnodeModuleFileWillBeRefused",
    rules: "modules.rules.yml",
    collector: "modules",
    enabled_by_default: true,
    threshold: None,
    terms: &[
        Term::Compare(&FILE_UNSIGNED),
        Term::Compare(&FILE_SIGNER_UNTRUSTED),
        Term::Compare(&SIGNATURES_ENFORCED),
        Term::Compare(&LOCKED_DOWN),
    ],
    pending: settled,
    judge: |page, threshold| {
        let enforced = page
            .matching(&SIGNATURES_ENFORCED, threshold)
            .next()
            .is_some()
            || page.matching(&LOCKED_DOWN, threshold).next().is_some();
        if !enforced {
            return Vec::new();
        }
        let unsigned = each(page, &FILE_UNSIGNED, threshold, |sample| {
            finding(
                sample.label("module"),
                format!(
                    "{} is not signed, and the kernel enforces module signatures: its next load fails",
                    sample.label("file")
                ),
            )
        });
        let untrusted = each(page, &FILE_SIGNER_UNTRUSTED, threshold, |sample| {
            finding(
                sample.label("module"),
                format!(
                    "{} is signed by {}, a key the kernel does not hold, and the kernel enforces module signatures: its next load fails",
                    sample.label("file"),
                    sample.label("signer")
                ),
            )
        });
        unsigned.into_iter().chain(untrusted).collect()
    },
};

static ANY_REFUSED: Compare = compare(
    labelled(
        "hpcnode_kernel_log_events_before_start",
        "event",
        Match::Regex,
        "unsigned_module_rejected|unverifiable_module_rejected|lockdown_refused_module",
    ),
    Op::Gt,
    0.0,
);
static KERNEL_LOG_ATTACHED: Compare = compare(
    labelled(
        "hpcnode_ebpf_probe_attached",
        "probe",
        Match::Equal,
        "kernel_log",
    ),
    Op::Eq,
    1.0,
);
static BEFORE_START_READ: Selector = metric("hpcnode_kernel_log_before_start_complete");

/// The records from before start are read on a thread of their own once the `kernel_log`
/// probe attached (collectors/ebpf/kernel_log/before_start.rs `read_before_start`): until
/// they are counted, none of their series is served.
fn before_start_pending(page: &Page<'_>) -> Option<&'static str> {
    let attached = page
        .matching(&KERNEL_LOG_ATTACHED, f64::NAN)
        .next()
        .is_some();
    let read = page.select(&BEFORE_START_READ).next().is_some();
    (attached && !read)
        .then_some("the kernel log from before the exporter started is still being read")
}

const MODULE_REFUSED_BEFORE_START: Check = Check {
    name: "module_refused_before_start",
    alert: "HpcnodeModuleRefusedBeforeStart",
    rules: "modules.rules.yml",
    collector: "ebpf",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&ANY_REFUSED)],
    pending: before_start_pending,
    judge: |page, threshold| {
        // `sum by (event) (...) > 0`.
        let mut sums: Vec<(&str, f64)> = Vec::new();
        for sample in page.select(&ANY_REFUSED.selector) {
            match sums
                .iter_mut()
                .find(|(event, _)| *event == sample.label("event"))
            {
                Some((_, sum)) => *sum += sample.value,
                None => sums.push((sample.label("event"), sample.value)),
            }
        }
        sums.into_iter()
            .filter(|(_, sum)| ANY_REFUSED.keeps(*sum, threshold))
            .map(|(event, sum)| {
                finding(
                    event,
                    format!("the kernel log held {sum} such refusals of a module from before the exporter started (they stay until a reboot)"),
                )
            })
            .collect()
    },
};

static PORT_NOT_ACTIVE: Compare = compare(metric("hpcnode_rdma_port_state_id"), Op::Ne, 4.0);
static PORT_NOT_ACTIVE_DEFER: Compare = compare(metric("hpcnode_rdma_port_state_id"), Op::Ne, 5.0);

/// The port states `ports/N/state` prints (include/rdma/ib_verbs.h `enum ib_port_state`).
fn port_state(id: f64) -> &'static str {
    match id as i64 {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "unknown",
    }
}

const RDMA_PORT_STATE: Check = Check {
    name: "rdma_port_state",
    alert: "HpcnodeRdmaPortNotActive",
    rules: "rdma.rules.yml",
    collector: "rdma",
    enabled_by_default: true,
    threshold: None,
    terms: &[
        Term::Compare(&PORT_NOT_ACTIVE),
        Term::Compare(&PORT_NOT_ACTIVE_DEFER),
    ],
    pending: settled,
    judge: |page, threshold| {
        page.matching(&PORT_NOT_ACTIVE, threshold)
            .filter(|sample| {
                page.any_matching_on(&PORT_NOT_ACTIVE_DEFER, sample, &["device", "port"])
            })
            .map(|sample| {
                finding(
                    port(sample),
                    format!(
                        "port state {} ({}), not ACTIVE",
                        sample.value,
                        port_state(sample.value)
                    ),
                )
            })
            .collect()
    },
};

static PHYSICAL_NOT_LINK_UP: Compare =
    compare(metric("hpcnode_rdma_port_physical_state_id"), Op::Ne, 5.0);
static PHYSICAL_TRAINING: Compare =
    compare(metric("hpcnode_rdma_port_physical_state_id"), Op::Eq, 4.0);
static PORT_ACTIVE: Compare = compare(metric("hpcnode_rdma_port_state_id"), Op::Eq, 4.0);

/// The physical states `ports/N/phys_state` prints (drivers/infiniband/core/sysfs.c
/// `phys_state_to_str`).
fn physical_state(id: f64) -> &'static str {
    match id as i64 {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "Phy Test",
        _ => "unknown",
    }
}

const RDMA_PORT_PHYSICAL_STATE: Check = Check {
    name: "rdma_port_physical_state",
    alert: "HpcnodeRdmaPortPhysicalStateNotLinkUp",
    rules: "rdma.rules.yml",
    collector: "rdma",
    enabled_by_default: true,
    threshold: None,
    terms: &[
        Term::Compare(&PHYSICAL_NOT_LINK_UP),
        Term::Compare(&PHYSICAL_TRAINING),
        Term::Compare(&PORT_ACTIVE),
    ],
    pending: settled,
    judge: |page, threshold| {
        // `... unless (physical == 4 and state == 4)`: some mlx5 firmware prints "4: ACTIVE"
        // as the physical state of a working link.
        let working = |sample: &Sample| {
            PHYSICAL_TRAINING.keeps(sample.value, threshold)
                && page.any_matching_on(&PORT_ACTIVE, sample, &["device", "port"])
        };
        page.matching(&PHYSICAL_NOT_LINK_UP, threshold)
            .filter(|sample| !working(sample))
            .map(|sample| {
                finding(
                    port(sample),
                    format!(
                        "physical state {} ({}), not LinkUp",
                        sample.value,
                        physical_state(sample.value)
                    ),
                )
            })
            .collect()
    },
};

static REPORTER_IN_ERROR: Compare = compare(
    metric("hpcnode_rdma_device_health_reporter_healthy"),
    Op::Eq,
    0.0,
);

const RDMA_HEALTH_REPORTER: Check = Check {
    name: "rdma_health_reporter",
    alert: "HpcnodeRdmaDeviceHealthReporterError",
    rules: "rdma.rules.yml",
    collector: "rdma",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&REPORTER_IN_ERROR)],
    pending: settled,
    judge: |page, threshold| {
        each(page, &REPORTER_IN_ERROR, threshold, |sample| {
            let on_port = match sample.label("devlink_port") {
                "" => String::new(),
                port => format!(" of devlink port {port}"),
            };
            finding(
                sample.label("device"),
                format!(
                    "devlink health reporter {}{on_port} in error",
                    sample.label("reporter")
                ),
            )
        })
    },
};

static PROVIDER_UNUSABLE: Compare = compare(
    labelled(
        "hpcnode_rdma_device_provider",
        "status",
        Match::Regex,
        "missing|abi_mismatch|no_uverbs",
    ),
    Op::Eq,
    1.0,
);

const RDMA_PROVIDER: Check = Check {
    name: "rdma_provider",
    alert: "HpcnodeRdmaProviderMissing",
    rules: "rdma_providers.rules.yml",
    collector: "rdma_userspace",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&PROVIDER_UNUSABLE)],
    pending: settled,
    judge: |page, threshold| {
        each(page, &PROVIDER_UNUSABLE, threshold, |sample| {
            let provider = match sample.label("provider") {
                "" => "of an unknown driver".to_string(),
                provider => provider.to_string(),
            };
            finding(
                sample.label("device"),
                format!(
                    "libibverbs provider {provider} {}: verbs applications do not see the device",
                    sample.label("status")
                ),
            )
        })
    },
};

static INVISIBLE_TO_VERBS: Compare =
    compare(metric("hpcnode_rdma_device_visible_to_verbs"), Op::Eq, 0.0);

const RDMA_VERBS_VISIBLE: Check = Check {
    name: "rdma_verbs_visible",
    alert: "HpcnodeRdmaDeviceInvisibleToVerbs",
    rules: "rdma_providers.rules.yml",
    collector: "verbs",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&INVISIBLE_TO_VERBS)],
    pending: settled,
    judge: |page, threshold| {
        // `max by (device) (...) == 0`.
        page.max_by(&INVISIBLE_TO_VERBS.selector, "device")
            .into_iter()
            .filter(|(_, max)| INVISIBLE_TO_VERBS.keeps(*max, threshold))
            .map(|(device, _)| {
                finding(
                    device,
                    "in sysfs, but ibv_get_device_list of the libibverbs applications load does not return it",
                )
            })
            .collect()
    },
};

static NO_DRIVER: Compare = compare(metric("hpcnode_pci_driver_bound"), Op::Eq, 0.0);
static DEVICE_INFO: Selector = metric("hpcnode_pci_device_info");
static ALIAS_MODULES: Selector = metric("hpcnode_pci_unbound_device_alias_module");

const PCI_DRIVER: Check = Check {
    name: "pci_driver",
    alert: "HpcnodePciDeviceWithoutDriver",
    rules: "pci.rules.yml",
    collector: "pci",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&NO_DRIVER), Term::Series(&DEVICE_INFO)],
    pending: settled,
    judge: |page, threshold| {
        each(page, &NO_DRIVER, threshold, |sample| {
            let address = sample.label("device");
            let identity = page
                .select(&DEVICE_INFO)
                .find(|info| info.label("device") == address)
                .map(|info| {
                    format!(
                        " ({}:{}, class {})",
                        info.label("vendor_id"),
                        info.label("device_id"),
                        info.label("class")
                    )
                })
                .unwrap_or_default();
            let modules: Vec<String> = page
                .select(&ALIAS_MODULES)
                .filter(|alias| alias.label("device") == address)
                .map(|alias| {
                    let mut module = alias.label("module").to_string();
                    if !alias.label("install").is_empty() {
                        module.push_str(" (a modprobe.d install rule replaces it)");
                    }
                    if alias.label("blacklisted") == "1" {
                        module.push_str(" (blacklisted)");
                    }
                    module
                })
                .collect();
            let claimed = match modules.is_empty() {
                true => String::new(),
                false => format!("; modules whose aliases claim it: {}", modules.join(", ")),
            };
            finding(address, format!("no driver bound{identity}{claimed}"))
        })
    },
};

static NOT_READY: Compare = compare(metric("hpcnode_pci_passthrough_ready"), Op::Eq, 0.0);
static PASSTHROUGH_CHECK: Selector = metric("hpcnode_pci_passthrough_check");

const PCI_PASSTHROUGH: Check = Check {
    name: "pci_passthrough",
    alert: "HpcnodePciPassthroughNotReady",
    rules: "pci.rules.yml",
    collector: "pci",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&NOT_READY)],
    pending: settled,
    judge: |page, threshold| {
        each(page, &NOT_READY, threshold, |sample| {
            let address = sample.label("device");
            let failing: Vec<&str> = page
                .select(&PASSTHROUGH_CHECK)
                .filter(|check| check.label("device") == address && check.value == 0.0)
                .map(|check| check.label("check"))
                .collect();
            finding(
                address,
                format!(
                    "meant for passthrough but not ready; failing: {}",
                    failing.join(", ")
                ),
            )
        })
    },
};

static LINK_TRAINED_DOWN: Ratio = Ratio {
    numerator: labelled("hpcnode_pci_link_width", "link", Match::Equal, "current"),
    denominator: labelled("hpcnode_pci_link_width", "link", Match::Equal, "maximum"),
    ignoring: "link",
    op: Op::Lt,
};

const PCI_LINK_WIDTH: Check = Check {
    name: "pci_link_width",
    alert: "HpcnodePciLinkDegraded",
    rules: "pci.rules.yml",
    collector: "pci",
    // A link trained down leaves the device working, at less bandwidth: whether that drains a
    // node is each site's call.
    enabled_by_default: false,
    threshold: Some(Threshold {
        name: "pci_link_width_ratio_min",
        default: 1.0,
    }),
    terms: &[Term::Ratio(&LINK_TRAINED_DOWN)],
    pending: settled,
    judge: |page, threshold| {
        let ratio = &LINK_TRAINED_DOWN;
        page.select(&ratio.numerator)
            .filter_map(|current| {
                let maximum = page.select(&ratio.denominator).find(|maximum| {
                    (current.labels.iter())
                        .filter(|(name, _)| name != ratio.ignoring)
                        .all(|(name, value)| maximum.label(name) == value)
                })?;
                let share = current.value / maximum.value;
                ratio.op.holds(share, threshold).then(|| {
                    finding(
                        current.label("device"),
                        format!(
                            "PCIe link x{} of x{}, a share of {share} below {threshold}",
                            current.value, maximum.value
                        ),
                    )
                })
            })
            .collect()
    },
};

static CARD_NOT_ONLINE: Compare = compare(
    labelled(
        "hpcnode_mic_card_state",
        "state",
        Match::NotRegex,
        "online|booting|booting_firmware",
    ),
    Op::Eq,
    1.0,
);

const MIC_CARD_STATE: Check = Check {
    name: "mic_card_state",
    alert: "HpcnodeMicCardNotOnline",
    rules: "mic.rules.yml",
    collector: "mic",
    enabled_by_default: true,
    threshold: None,
    terms: &[Term::Compare(&CARD_NOT_ONLINE)],
    pending: settled,
    judge: |page, threshold| {
        each(page, &CARD_NOT_ONLINE, threshold, |sample| {
            finding(
                sample.label("device"),
                format!("card state {}, not online", sample.label("state")),
            )
        })
    },
};

static DIE_TOO_HOT: Compare = Compare {
    selector: labelled(
        "hpcnode_mic_temperature_celsius",
        "sensor",
        Match::Equal,
        "die",
    ),
    op: Op::Gt,
    bound: Bound::Threshold,
};

const MIC_DIE_TEMPERATURE: Check = Check {
    name: "mic_die_temperature",
    alert: "HpcnodeMicDieTemperatureHigh",
    rules: "mic.rules.yml",
    collector: "mic",
    enabled_by_default: true,
    threshold: Some(Threshold {
        name: "mic_die_temperature_high_celsius",
        default: 90.0,
    }),
    terms: &[Term::Compare(&DIE_TOO_HOT)],
    pending: settled,
    judge: |page, threshold| {
        // `max without (source) (...)`: one reading per card, whichever source gave it.
        page.max_by(&DIE_TOO_HOT.selector, "device")
            .into_iter()
            .filter(|(_, max)| DIE_TOO_HOT.keeps(*max, threshold))
            .map(|(device, max)| {
                finding(
                    device,
                    format!("die temperature {max} degrees C, above {threshold}"),
                )
            })
            .collect()
    },
};

#[cfg(test)]
mod tests;
