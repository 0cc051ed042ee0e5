//! Every kernel log line the exporter counts, in one table, and the matcher that finds the
//! pattern a line matches. Each pattern says what its lines count as: an event of
//! `hpcnode_kernel_log_events_total`, or a form of IOMMU fault report (read by
//! [`super::iommu_faults`]).

use regex::{Captures, Regex, RegexSet};

/// One kind of kernel log line: what it counts as, and its regex.
pub struct LinePattern {
    pub kind: LineKind,
    pub regex: &'static str,
}

pub enum LineKind {
    /// A kernel log event; the regex's named capture groups become its labels (a label the
    /// line does not capture is empty). A `bounded` label keeps the values its test accepts
    /// and is `other` for any other.
    Event {
        event: &'static str,
        labels: &'static [&'static str],
        bounded: Option<Bounded>,
    },
    /// An IOMMU fault report in one of its forms.
    IommuFault(FaultLine),
}

/// The forms of IOMMU fault lines, each with the capture groups its regex has.
#[derive(Debug, Clone, Copy)]
pub enum FaultLine {
    /// Intel, one line: `access`, `device`, `reason`.
    Intel,
    /// Intel, first of the old two lines: `access`, `device`.
    IntelOldRequest,
    /// Intel, second of the old two lines: `reason`.
    IntelOldReason,
    /// AMD-Vi: `device` or `event_device`, and `flags`.
    Amd,
}

/// A label whose values are a known set; any other value is `other`.
#[derive(Clone, Copy)]
pub struct Bounded {
    pub label: &'static str,
    pub known: fn(&str) -> bool,
}

const fn event(
    event: &'static str,
    regex: &'static str,
    labels: &'static [&'static str],
) -> LinePattern {
    LinePattern {
        kind: LineKind::Event {
            event,
            labels,
            bounded: None,
        },
        regex,
    }
}

const fn bounded_event(
    event: &'static str,
    regex: &'static str,
    labels: &'static [&'static str],
    bounded: Bounded,
) -> LinePattern {
    LinePattern {
        kind: LineKind::Event {
            event,
            labels,
            bounded: Some(bounded),
        },
        regex,
    }
}

/// The start of every `mlx5_core_{err,warn,info}` and `mlx5_log` line: `dev_printk`'s
/// `<driver> <device>: ` (`__dev_printk`, drivers/base/core.c), then the driver's own
/// `"%s:%d:(pid %d): "` with `__func__` and `__LINE__` (mlx5_core.h). `device` is the PCI
/// address. The driver health patterns use ASCII classes (`[0-9]`, not `\d`): Unicode ones made
/// the matcher take seven times as long to build, which the before-start read felt in the lab.
macro_rules! mlx5_line {
    ($rest:literal) => {
        concat!(
            r"^mlx5_core (?P<device>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): [A-Za-z0-9_]+:[0-9]+:\(pid [0-9]+\): ",
            $rest
        )
    };
}

/// Xid numbers NVIDIA documents: the rows of its Xid catalog, 1 to 154
/// (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html; `nverror.h` of
/// NVIDIA/open-gpu-kernel-modules defines up to 153, 154 is the catalog's recovery-action Xid).
fn documented_xid(xid: &str) -> bool {
    !xid.starts_with('0') && xid.parse::<u16>().is_ok_and(|n| (1..=154).contains(&n))
}

const fn iommu_fault(form: FaultLine, regex: &'static str) -> LinePattern {
    LinePattern {
        kind: LineKind::IommuFault(form),
        regex,
    }
}

/// The lines counted, with the kernel formats they come from. A line counts as the first
/// pattern it matches.
pub const PATTERNS: &[LinePattern] = &[
    // pr_notice_once in module_sig_check (4.x+, `%s: module verification failed: ...`); 3.x
    // printed two spaces before "required". Once per boot: it names the first unsigned module.
    event(
        "module_verification_failed",
        r"^(?P<module>[^\s:]+): module verification failed: signature and/or +required key missing - tainting kernel",
        &["module"],
    ),
    // module_sig_check with enforcement (5.4+): `Loading of %s is rejected`.
    event(
        "unsigned_module_rejected",
        r"^Loading of unsigned module is rejected",
        &[],
    ),
    event(
        "unverifiable_module_rejected",
        r"^Loading of module with (?:unavailable key|unsupported crypto) is rejected",
        &[],
    ),
    // security/lockdown: `Lockdown: %s: %s is restricted; see man kernel_lockdown.7` (comm,
    // reason); the distribution patches before 5.4 wrote the reason with a capital letter.
    event(
        "lockdown_refused_module",
        r"^Lockdown: (?:[^:]*: )?[Uu]nsigned module loading is restricted",
        &[],
    ),
    // IOMMU faults, every Intel VT-d (DMAR) and AMD-Vi format of kernels 3.10 to 6.x. Intel
    // prints the requester as `bus:slot.function` without a PCI segment, AMD with one (older
    // kernels without): the `device` label is the address as printed.
    //
    // Intel 4.20+ (`dmar_fault_do_one`): `DMAR: [DMA Read NO_PASID] Request device [00:03.0]
    // fault addr 0x300000 [fault reason 0x06] PTE Read access is not set`; 5.x `[DMA Read] ...
    // PASID ffffffff fault addr ...`; interrupt remapping `[INTR-REMAP] ... fault index ...`.
    iommu_fault(
        FaultLine::Intel,
        r"^DMAR: \[(?P<access>DMA Read|DMA Write|INTR-REMAP)[^\]]*\] Request device \[(?P<device>[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\](?: PASID [0-9a-fx]+)? fault (?:addr|index) (?:0x)?[0-9a-f]+ \[fault reason (?:0x)?[0-9a-f]+\] ?(?P<reason>.*)$",
    ),
    // Intel 3.10/4.x, first line: `DMAR:[DMA Read] Request device [3b:00.0] fault addr 1ff000 `
    // (3.x prefix `dmar:`).
    iommu_fault(
        FaultLine::IntelOldRequest,
        r"^(?:DMAR|dmar): ?\[(?P<access>DMA Read|DMA Write)\] Request device \[(?P<device>[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\] fault addr [0-9a-f]+\s*$",
    ),
    // Intel 3.10/4.x, second line: `DMAR:[fault reason 06] PTE Read access is not set`.
    iommu_fault(
        FaultLine::IntelOldReason,
        r"^(?:DMAR|dmar): ?\[fault reason [0-9a-f]+\] ?(?P<reason>.*)$",
    ),
    // `<driver> 0000:3b:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000b
    // address=0xfffd1000 flags=0x0000]`, and the older form with `device=3b:00.0` inside.
    iommu_fault(
        FaultLine::Amd,
        r"^(?:\S+ (?P<device>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): )?AMD-Vi: Event logged \[IO_PAGE_FAULT (?:device=(?P<event_device>[0-9a-f:.]+) )?domain=0x[0-9a-f]+ address=0x[0-9a-f]+ flags=0x(?P<flags>[0-9a-f]+)\]",
    ),
    // Driver health events. Each format was checked in the mlx5_core.ko and vmlinux of the
    // lab's three kernels (Debian 5.10.262, 6.1.192, 6.12.118: `strings` of the binaries).
    // drivers/net/ethernet/mellanox/mlx5/core/cmd.c: wait_func (`%s(0x%x) timeout. Will cause
    // a leak of a command resource`, `%s(0x%x) canceled on out of queue timeout.`),
    // cb_timeout_handler (`cmd[%d]: %s(0x%x) Async, timeout. ...`), and from 6.1
    // cmd_work_handler (`%s(0x%x) timeout while waiting for command semaphore.`). `command` is
    // mlx5_command_str(): the opcode's name, or `unknown command opcode`. The `recovered
    // after timeout` lines are not counted: the command completed.
    event(
        "mlx5_cmd_timeout",
        mlx5_line!(
            r"(?:cmd\[[0-9]+\]: )?(?P<command>[A-Z0-9_]+|unknown command opcode)\(0x[0-9a-f]+\) (?:(?:Async, )?timeout\. Will cause a leak of a command resource|canceled on out of queue timeout\.|timeout while waiting for command semaphore\.)$"
        ),
        &["device", "command"],
    ),
    // health.c: poll_health, the firmware's health counter stopped (5.10, 6.1, 6.12).
    event(
        "mlx5_health_compromised",
        mlx5_line!(r"device's health compromised - reached miss count$"),
        &["device"],
    ),
    // health.c: poll_health, `Fatal error %u detected` (the enum mlx5_sensor that fired).
    event(
        "mlx5_fatal_error",
        mlx5_line!(r"Fatal error (?P<sensor>[0-9]+) detected$"),
        &["device", "sensor"],
    ),
    // health.c: print_health_info, `synd 0x%x: %s` (hsynd_str; mlx5_core_err in 5.10,
    // mlx5_log from 6.1): one line per health report, printed only when the syndrome is set.
    // `syndrome` is the firmware's 8-bit syndrome in hex.
    event(
        "mlx5_health_syndrome",
        mlx5_line!(r"synd 0x(?P<syndrome>[0-9a-f]{1,2}): "),
        &["device", "syndrome"],
    ),
    // events.c: port_module_event, `Port module event: module %u, %s` and `Port module
    // event[error]: module %u, %s, %s`, with the strings of mlx5_pme_status_to_string and
    // mlx5_pme_error_to_string (the same tables in 5.10, 6.1 and 6.12). Rate-limited by
    // printk_ratelimit(): a lower bound (the exact counts are the netdev's module_* ethtool
    // statistics).
    event(
        "mlx5_port_module",
        mlx5_line!(
            r"Port module event(?:\[error\])?: module (?P<module>[0-9]{1,3}), (?P<status>Cable plugged|Cable unplugged|Cable error|Cable disabled|Unknown status)(?:, (?P<reason>Power budget exceeded|Long Range for non MLNX cable|Bus stuck \(I2C or data shorted\)|No EEPROM/retry timeout|Enforce part number list|Unknown identifier|High Temperature|Bad or shorted cable/module|One or more network ports have been powered down due to insufficient/unadvertised power on the PCIe slot|Unknown error))?$"
        ),
        &["device", "module", "status", "reason"],
    ),
    // net/sched/sch_generic.c: dev_watchdog. 5.10 (and before): WARN_ONCE(1, KERN_INFO
    // "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out\n", name, driver), once per boot;
    // some kernels add ` %u ms`.
    event(
        "netdev_tx_timeout",
        r"^NETDEV WATCHDOG: (?P<netdev>[^ :]+) \((?P<driver>[^) ]*)\): transmit queue [0-9]+ timed out",
        &["driver", "device", "netdev"],
    ),
    // 6.1 and 6.12 (Debian's 6.1 has the backport): netdev_crit(dev, "NETDEV WATCHDOG: CPU: %d:
    // transmit queue %u timed out %u ms\n"), every time; __netdev_printk (net/core/dev.c)
    // prefixes `<driver> <device> <netdev>: `, or `<netdev>: ` for a netdev without a parent
    // device, and a state such as ` (unregistering)`.
    event(
        "netdev_tx_timeout",
        r"^(?:(?P<driver>[^ ]+) (?P<device>[^ ]+) )?(?P<netdev>[^ :]+)(?: \([a-z ]+\))?: NETDEV WATCHDOG: CPU: [0-9]+: transmit queue [0-9]+ timed out",
        &["driver", "device", "netdev"],
    ),
    // NVIDIA's driver (nvidia.ko, not in the kernel tree): `NVRM: Xid (PCI:0000:3b:00): 79,
    // pid=..., ...`; older drivers print the address without `PCI:`. The address has no
    // function number.
    bounded_event(
        "nvidia_xid",
        r"^NVRM: Xid \((?:PCI:)?(?P<device>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})\): (?P<xid>[0-9]+),",
        &["device", "xid"],
        Bounded {
            label: "xid",
            known: documented_xid,
        },
    ),
];

/// An event with its captured labels (name, value), in the regex's group order.
pub type EventKey = (&'static str, Vec<(&'static str, String)>);

/// What a line counts as.
pub enum LineMatch<'l> {
    Event(EventKey),
    IommuFault(FaultLine, Captures<'l>),
}

pub struct Matcher {
    any: RegexSet,
    patterns: Vec<(Regex, &'static LineKind)>,
}

impl Matcher {
    pub fn new(patterns: &'static [LinePattern]) -> Result<Matcher, regex::Error> {
        Ok(Matcher {
            any: RegexSet::new(patterns.iter().map(|p| p.regex))?,
            patterns: patterns
                .iter()
                .map(|p| Ok((Regex::new(p.regex)?, &p.kind)))
                .collect::<Result<_, regex::Error>>()?,
        })
    }

    /// What a line counts as, if anything (the first matching pattern).
    pub fn find<'l>(&self, line: &'l str) -> Option<LineMatch<'l>> {
        let index = self.any.matches(line).into_iter().next()?;
        let (regex, kind) = &self.patterns[index];
        let captures = regex.captures(line)?;
        Some(match kind {
            LineKind::Event {
                event,
                labels,
                bounded,
            } => {
                let labels = labels
                    .iter()
                    .map(|name| {
                        let value = captures.name(name).map_or("", |m| m.as_str());
                        let unknown =
                            bounded.is_some_and(|b| b.label == *name && !(b.known)(value));
                        (*name, if unknown { "other" } else { value }.to_string())
                    })
                    .collect();
                LineMatch::Event((event, labels))
            }
            LineKind::IommuFault(form) => LineMatch::IommuFault(*form, captures),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(line: &str) -> Option<EventKey> {
        match Matcher::new(PATTERNS).unwrap().find(line)? {
            LineMatch::Event(key) => Some(key),
            LineMatch::IommuFault(form, _) => panic!("{line:?} matched {form:?}"),
        }
    }

    #[test]
    fn module_verification_failed_in_4x_and_3x_formats() {
        let modern = "pcspkr: module verification failed: signature and/or required key missing - tainting kernel";
        assert_eq!(
            event(modern),
            Some((
                "module_verification_failed",
                vec![("module", "pcspkr".to_string())]
            ))
        );
        let el7 = "mlx5_core: module verification failed: signature and/or  required key missing - tainting kernel";
        assert_eq!(
            event(el7).unwrap().1,
            vec![("module", "mlx5_core".to_string())]
        );
    }

    #[test]
    fn rejections_and_lockdown() {
        assert_eq!(
            event("Loading of unsigned module is rejected").unwrap().0,
            "unsigned_module_rejected"
        );
        assert_eq!(
            event("Loading of module with unavailable key is rejected")
                .unwrap()
                .0,
            "unverifiable_module_rejected"
        );
        for line in [
            "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7",
            "Lockdown: insmod: unsigned module loading is restricted; see man kernel_lockdown.7",
            // RHEL 8 / Fedora lockdown patches before 5.4.
            "Lockdown: modprobe: Unsigned module loading is restricted; see man kernel_lockdown.7",
            "Lockdown: Unsigned module loading is restricted; see man kernel_lockdown.7",
        ] {
            assert_eq!(
                event(line),
                Some(("lockdown_refused_module", vec![])),
                "{line}"
            );
        }
    }

    #[test]
    fn other_lines_do_not_count() {
        for line in [
            "Lockdown: systemd: /dev/mem,kmem,port is restricted; see man kernel_lockdown.7",
            "Lockdown: bpftool: use of bpf to read kernel RAM is restricted; see man kernel_lockdown.7",
            "module verification failed", // no module name: not the kernel's line
            "mlx5_core 0000:3b:00.0: firmware version: 16.35.2000",
            "",
        ] {
            assert_eq!(event(line), None, "{line}");
        }
    }

    /// Every named group is a label, and every pattern of one event has the same labels.
    #[test]
    fn every_named_group_is_a_label_of_its_event() {
        let mut labels_of = std::collections::BTreeMap::new();
        for pattern in PATTERNS {
            let LineKind::Event { event, labels, .. } = pattern.kind else {
                continue;
            };
            let regex = Regex::new(pattern.regex).unwrap();
            for group in regex.capture_names().flatten() {
                assert!(labels.contains(&group), "{event}: {group}");
            }
            assert_eq!(*labels_of.entry(event).or_insert(labels), labels, "{event}");
        }
    }
}

#[cfg(test)]
mod driver_health_tests;

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn event_of(matcher: &Matcher, line: &str) -> Option<EventKey> {
        match matcher.find(line)? {
            LineMatch::Event(key) => Some(key),
            LineMatch::IommuFault(..) => None,
        }
    }

    /// Lines as the kernel prints them, with the module or command the kernel fills in.
    #[test]
    fn printed_module_lines_are_their_events() {
        let matcher = Matcher::new(PATTERNS).unwrap();
        proptest!(|(module in "[^\\s:]{1,56}", spaces in " {1,2}", comm in "[^:\n]{0,16}")| {
            let line = format!(
                "{module}: module verification failed: signature and/or{spaces}required key missing - tainting kernel"
            );
            prop_assert_eq!(
                event_of(&matcher, &line),
                Some(("module_verification_failed", vec![("module", module.clone())]))
            );
            let line = format!(
                "Lockdown: {comm}: unsigned module loading is restricted; see man kernel_lockdown.7"
            );
            prop_assert_eq!(event_of(&matcher, &line), Some(("lockdown_refused_module", vec![])));
        });
    }
}
