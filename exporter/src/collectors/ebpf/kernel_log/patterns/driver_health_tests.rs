//! The driver health patterns against lines built from the drivers' own format strings, as
//! the lab's kernels (5.10, 6.1, 6.12) and NVIDIA's driver print them.

use super::*;

/// What printk makes of `format` with `args` (already formatted, in order): each conversion
/// (`%s`, `%d`, `%u`, `%x`, `%04x`, ...) takes the next argument.
fn printk(format: &str, args: &[&str]) -> String {
    let mut args = args.iter();
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        for spec in chars.by_ref() {
            if spec.is_ascii_alphabetic() {
                out.push_str(args.next().expect("an argument per conversion"));
                break;
            }
        }
    }
    assert!(args.next().is_none(), "more arguments than conversions");
    out
}

/// An `mlx5_core_*`/`mlx5_log` line of the device at `pci`: `__dev_printk`'s
/// `"%s %s: %pV"` around mlx5's `"%s:%d:(pid %d): " format`.
fn mlx5_line(pci: &str, function: &str, format: &str, args: &[&str]) -> String {
    let mut all = vec![function, "1155", "1967"];
    all.extend_from_slice(args);
    let message = printk(&format!("%s:%d:(pid %d): {format}"), &all);
    printk("%s %s: %s", &["mlx5_core", pci, &message])
}

fn event(line: &str) -> Option<EventKey> {
    match Matcher::new(PATTERNS).unwrap().find(line)? {
        LineMatch::Event(key) => Some(key),
        LineMatch::IommuFault(form, _) => panic!("{line:?} matched {form:?}"),
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

const PCI: &str = "0000:3b:00.0";

#[test]
fn mlx5_command_timeouts_of_every_lab_kernel() {
    for (function, format, args) in [
        // cmd.c wait_func, 5.10 to 6.12.
        (
            "wait_func",
            "%s(0x%x) timeout. Will cause a leak of a command resource",
            &["TEARDOWN_HCA", "103"][..],
        ),
        (
            "wait_func",
            "%s(0x%x) canceled on out of queue timeout.",
            &["CREATE_MKEY", "200"],
        ),
        // cmd.c cb_timeout_handler.
        (
            "cb_timeout_handler",
            "cmd[%d]: %s(0x%x) Async, timeout. Will cause a leak of a command resource",
            &["3", "TEARDOWN_HCA", "103"],
        ),
        // cmd.c cmd_work_handler, 6.1 and 6.12.
        (
            "cmd_work_handler",
            "%s(0x%x) timeout while waiting for command semaphore.",
            &["TEARDOWN_HCA", "103"],
        ),
    ] {
        let line = mlx5_line(PCI, function, format, args);
        let command = args[args.len() - 2];
        assert_eq!(
            event(&line),
            Some((
                "mlx5_cmd_timeout",
                labels(&[("device", PCI), ("command", command)])
            )),
            "{line}"
        );
    }
    let unknown = mlx5_line(
        PCI,
        "wait_func",
        "%s(0x%x) timeout. Will cause a leak of a command resource",
        &["unknown command opcode", "9999"],
    );
    assert_eq!(event(&unknown).unwrap().1[1].1, "unknown command opcode");
    // The command completed after all: no timeout to count.
    let recovered = mlx5_line(
        PCI,
        "cb_timeout_handler",
        "cmd[%d]: %s(0x%x) Async, recovered after timeout",
        &["3", "TEARDOWN_HCA", "103"],
    );
    assert_eq!(event(&recovered), None);
}

#[test]
fn mlx5_health_reports() {
    let compromised = mlx5_line(
        PCI,
        "poll_health",
        "device's health compromised - reached miss count",
        &[],
    );
    assert_eq!(
        event(&compromised),
        Some(("mlx5_health_compromised", labels(&[("device", PCI)])))
    );
    let fatal = mlx5_line(PCI, "poll_health", "Fatal error %u detected", &["2"]);
    assert_eq!(
        event(&fatal),
        Some((
            "mlx5_fatal_error",
            labels(&[("device", PCI), ("sensor", "2")])
        ))
    );
    let syndrome = mlx5_line(
        PCI,
        "print_health_info",
        "synd 0x%x: %s",
        &["1", "firmware internal error"],
    );
    assert_eq!(
        event(&syndrome),
        Some((
            "mlx5_health_syndrome",
            labels(&[("device", PCI), ("syndrome", "1")])
        ))
    );
    // The other lines of the same report do not count again.
    for (format, args) in [
        ("ext_synd 0x%04x", &["0x8f3b"][..]),
        ("assert_var[%d] 0x%08x", &["0", "00000000"]),
        (
            "Health issue observed, %s, severity(%d) %s:",
            &["firmware internal error", "3", "ERROR"],
        ),
    ] {
        let line = mlx5_line(PCI, "print_health_info", format, args);
        assert_eq!(event(&line), None, "{line}");
    }
}

#[test]
fn mlx5_port_module_events_with_the_drivers_reasons() {
    for status in ["Cable plugged", "Cable unplugged", "Cable disabled"] {
        let line = mlx5_line(
            PCI,
            "port_module_event",
            "Port module event: module %u, %s",
            &["1", status],
        );
        assert_eq!(
            event(&line),
            Some((
                "mlx5_port_module",
                labels(&[
                    ("device", PCI),
                    ("module", "1"),
                    ("status", status),
                    ("reason", "")
                ])
            )),
            "{line}"
        );
    }
    // mlx5_pme_error_to_string, every entry.
    for reason in [
        "Power budget exceeded",
        "Long Range for non MLNX cable",
        "Bus stuck (I2C or data shorted)",
        "No EEPROM/retry timeout",
        "Enforce part number list",
        "Unknown identifier",
        "High Temperature",
        "Bad or shorted cable/module",
        "One or more network ports have been powered down due to insufficient/unadvertised power on the PCIe slot",
        "Unknown error",
    ] {
        let line = mlx5_line(
            PCI,
            "port_module_event",
            "Port module event[error]: module %u, %s, %s",
            &["0", "Cable error", reason],
        );
        assert_eq!(event(&line).unwrap().1[3], ("reason", reason.to_string()), "{line}");
    }
    // A reason outside the driver's table is not a label value.
    let invented = mlx5_line(
        PCI,
        "port_module_event",
        "Port module event[error]: module %u, %s, %s",
        &["0", "Cable error", "anything a writer likes"],
    );
    assert_eq!(event(&invented), None);
}

#[test]
fn netdev_tx_timeouts_old_warn_and_netdev_crit() {
    // 5.10: WARN_ONCE(1, KERN_INFO "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out\n").
    let warn = printk(
        "NETDEV WATCHDOG: %s (%s): transmit queue %u timed out",
        &["ens1f0np0", "mlx5_core", "3"],
    );
    assert_eq!(
        event(&warn),
        Some((
            "netdev_tx_timeout",
            labels(&[
                ("driver", "mlx5_core"),
                ("device", ""),
                ("netdev", "ens1f0np0")
            ])
        ))
    );
    // 6.1, 6.12: netdev_crit through __netdev_printk's "%s %s %s%s: %pV".
    let message = printk(
        "NETDEV WATCHDOG: CPU: %d: transmit queue %u timed out %u ms",
        &["7", "3", "5120"],
    );
    let crit = printk(
        "%s %s %s%s: %s",
        &["mlx5_core", PCI, "ens1f0np0", "", &message],
    );
    assert_eq!(
        event(&crit),
        Some((
            "netdev_tx_timeout",
            labels(&[
                ("driver", "mlx5_core"),
                ("device", PCI),
                ("netdev", "ens1f0np0")
            ])
        ))
    );
    // A netdev without a parent device: "%s%s: %pV".
    let orphan = printk("%s%s: %s", &["veth0", "", &message]);
    assert_eq!(
        event(&orphan),
        Some((
            "netdev_tx_timeout",
            labels(&[("driver", ""), ("device", ""), ("netdev", "veth0")])
        ))
    );
}

#[test]
fn nvidia_xid_with_a_bounded_number() {
    for (line, device, xid) in [
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus.",
            "0000:3b:00",
            "79",
        ),
        (
            "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
            "0000:10:1c",
            "63",
        ),
        // Older drivers, without `PCI:`.
        (
            "NVRM: Xid (0000:01:00): 13, 0005 00000000 0000502d 00000104 00000000 00000100",
            "0000:01:00",
            "13",
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed", "0000:3b:00", "154"),
        // Not a documented number: one `other` series, whatever is written.
        ("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, x", "0000:3b:00", "other"),
        ("NVRM: Xid (PCI:0000:3b:00): 0, pid=1, x", "0000:3b:00", "other"),
        ("NVRM: Xid (PCI:0000:3b:00): 079, pid=1, x", "0000:3b:00", "other"),
    ] {
        assert_eq!(
            event(line),
            Some(("nvidia_xid", labels(&[("device", device), ("xid", xid)]))),
            "{line}"
        );
    }
}
