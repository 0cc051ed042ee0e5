//! IOMMU faults in the kernel log, counted by device, access and reason: the captures of the
//! fault lines [`super::patterns`] matches, one-line forms and the old two-line DMAR form.
//!
//! The kernel ratelimits these lines, so the counts are lower bounds.

use std::collections::BTreeMap;

use regex::Captures;

use super::patterns::FaultLine;

/// Distinct (device, access, reason) sets kept; more are counted as one `other` set.
const MAX_FAULT_SETS: usize = 64;
/// The longest reason text kept (the kernel's reason strings are shorter).
const MAX_REASON_CHARS: usize = 64;

/// A fault's labels: device, access (`read`, `write`, `interrupt`) and reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fault {
    pub device: String,
    pub access: &'static str,
    pub reason: String,
}

/// AMD-Vi event flags: bit 5 (RW) set for a write.
const AMD_EVENT_FLAG_RW: u32 = 0x020;

fn access(text: &str) -> &'static str {
    match text {
        "DMA Read" => "read",
        "DMA Write" => "write",
        _ => "interrupt",
    }
}

fn reason(text: &str) -> String {
    text.trim().chars().take(MAX_REASON_CHARS).collect()
}

/// Fault counts since start, fed one kernel log line at a time.
#[derive(Default)]
pub struct FaultCounts {
    counts: BTreeMap<Fault, u64>,
    /// The first line of an old two-line DMAR report, waiting for its reason line.
    pending: Option<Fault>,
}

impl FaultCounts {
    /// Counts one IOMMU fault line, given its form and the captures of its pattern.
    pub fn count_line(&mut self, form: FaultLine, captures: &Captures) {
        match form {
            FaultLine::Intel => self.add(Fault {
                device: captures["device"].to_string(),
                access: access(&captures["access"]),
                reason: reason(&captures["reason"]),
            }),
            FaultLine::IntelOldRequest => {
                // A request line still waiting means its reason line never came: count it so.
                if let Some(unfinished) = self.pending.take() {
                    self.add(unfinished);
                }
                self.pending = Some(Fault {
                    device: captures["device"].to_string(),
                    access: access(&captures["access"]),
                    reason: "unknown".to_string(),
                });
            }
            FaultLine::IntelOldReason => {
                if let Some(mut fault) = self.pending.take() {
                    fault.reason = reason(&captures["reason"]);
                    self.add(fault);
                }
            }
            FaultLine::Amd => {
                let device = captures
                    .name("device")
                    .or(captures.name("event_device"))
                    .map_or("", |m| m.as_str());
                let flags = u32::from_str_radix(&captures["flags"], 16).unwrap_or(0);
                self.add(Fault {
                    device: device.to_string(),
                    access: if flags & AMD_EVENT_FLAG_RW != 0 {
                        "write"
                    } else {
                        "read"
                    },
                    reason: "IO_PAGE_FAULT".to_string(),
                });
            }
        }
    }

    fn add(&mut self, fault: Fault) {
        let key = if self.counts.contains_key(&fault) || self.counts.len() < MAX_FAULT_SETS {
            fault
        } else {
            Fault {
                device: "other".to_string(),
                access: "other",
                reason: "other".to_string(),
            }
        };
        *self.counts.entry(key).or_default() += 1;
    }

    pub fn snapshot(&self) -> Vec<(Fault, u64)> {
        self.counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests {
    use super::super::patterns::{LineMatch, Matcher, PATTERNS};
    use super::*;
    use proptest::prelude::*;

    /// The fault counts of `lines`, as the kernel log reader counts them.
    fn count(matcher: &Matcher, lines: &[String]) -> Vec<(Fault, u64)> {
        let mut faults = FaultCounts::default();
        for line in lines {
            if let Some(LineMatch::IommuFault(form, captures)) = matcher.find(line) {
                faults.count_line(form, &captures);
            }
        }
        faults.snapshot()
    }

    /// A requester as Intel prints it (`%02x:%02x.%d`).
    fn intel_device() -> impl Strategy<Value = String> {
        (any::<u8>(), 0u8..32, 0u8..8)
            .prop_map(|(bus, slot, function)| format!("{bus:02x}:{slot:02x}.{function}"))
    }

    const ACCESSES: &[(&str, &str)] = &[
        ("DMA Read", "read"),
        ("DMA Write", "write"),
        ("INTR-REMAP", "interrupt"),
    ];

    #[test]
    fn printed_fault_lines_count_as_the_fault_they_report() {
        let matcher = Matcher::new(PATTERNS).unwrap();
        proptest!(|(
            device in intel_device(),
            (access, label) in prop::sample::select(ACCESSES),
            pasid in prop::sample::select(&["", " NO_PASID", " PASID 0x1"][..]),
            reason in "[ -~]{0,100}",
            address: u64,
        )| {
            let what = if access == "INTR-REMAP" { "index" } else { "addr" };
            let line = format!(
                "DMAR: [{access}{pasid}] Request device [{device}] fault {what} 0x{address:x} [fault reason 0x06] {reason}"
            );
            let expected = Fault {
                device: device.clone(),
                access: label,
                reason: reason.trim().chars().take(MAX_REASON_CHARS).collect(),
            };
            prop_assert_eq!(count(&matcher, &[line.trim_end().to_string()]), [(expected, 1)]);
        });
    }

    /// The two lines of kernels before 4.7; a request whose reason never came counts as unknown.
    #[test]
    fn printed_two_line_faults_pair_up() {
        let matcher = Matcher::new(PATTERNS).unwrap();
        proptest!(|(
            device in intel_device(),
            write: bool,
            reason in "[!-~]([ -~]{0,40}[!-~])?",
            lost: bool,
        )| {
            let access = if write { "DMA Write" } else { "DMA Read" };
            let request = format!("DMAR:[{access}] Request device [{device}] fault addr 1ff000 ");
            let mut lines = vec![request.clone(), format!("DMAR:[fault reason 06] {reason}")];
            if lost {
                lines.insert(0, request);
            }
            let fault = |reason: &str| Fault {
                device: device.clone(),
                access: if write { "write" } else { "read" },
                reason: reason.chars().take(MAX_REASON_CHARS).collect(),
            };
            let mut expected = vec![(fault(&reason), 1)];
            if lost {
                expected.push((fault("unknown"), 1));
                expected.sort();
            }
            prop_assert_eq!(count(&matcher, &lines), expected);
        });
    }

    #[test]
    fn printed_amd_faults_count_by_device_and_direction() {
        let matcher = Matcher::new(PATTERNS).unwrap();
        proptest!(|(
            domain: u16,
            device in intel_device(),
            flags: u16,
            driver in "[a-z_-]{1,12}",
            old_form: bool,
        )| {
            let (line, device) = if old_form {
                (format!("AMD-Vi: Event logged [IO_PAGE_FAULT device={device} domain=0x000b address=0x1000 flags=0x{flags:04x}]"), device)
            } else {
                let device = format!("{domain:04x}:{device}");
                (format!("{driver} {device}: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000b address=0xfffd1000 flags=0x{flags:04x}]"), device)
            };
            let access = if u32::from(flags) & AMD_EVENT_FLAG_RW != 0 { "write" } else { "read" };
            let expected = Fault { device, access, reason: "IO_PAGE_FAULT".to_string() };
            prop_assert_eq!(count(&matcher, &[line]), [(expected, 1)]);
        });
    }
}
