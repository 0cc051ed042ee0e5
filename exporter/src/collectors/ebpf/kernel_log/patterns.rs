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
    /// A kernel log event; the regex's named capture groups become its labels.
    Event {
        event: &'static str,
        labels: &'static [&'static str],
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

const fn event(
    event: &'static str,
    regex: &'static str,
    labels: &'static [&'static str],
) -> LinePattern {
    LinePattern {
        kind: LineKind::Event { event, labels },
        regex,
    }
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
            LineKind::Event { event, labels } => {
                let labels = labels
                    .iter()
                    .map(|name| {
                        let value = captures.name(name).map_or("", |m| m.as_str());
                        (*name, value.to_string())
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

    #[test]
    fn every_pattern_label_is_a_named_group() {
        for pattern in PATTERNS {
            let LineKind::Event { event, labels } = pattern.kind else {
                continue;
            };
            let regex = Regex::new(pattern.regex).unwrap();
            let groups: Vec<_> = regex.capture_names().flatten().collect();
            assert_eq!(groups, labels, "{event}");
        }
    }
}

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
