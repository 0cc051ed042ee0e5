//! The Xeon Phi (MIC) collector end to end: the real binary on fixture trees (MPSS 3 and MPSS 4
//! hosts, the card side, bad input), micras files built from real captures, and a fake
//! `libmicmgmt.so.0` compiled from C and loaded by the binary through the dynamic loader's
//! normal search path. Whole outputs are compared with `exporter/tests/golden/mic_*.prom`
//! (`HPCNODE_UPDATE_GOLDEN=1 cargo test --test it mic::` rewrites them).

use crate::util;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use util::golden::{check_fixture_output, errors_total, scrape};
use util::{fixture_root, is_root, support, Exporter, TreeCopy};

/// Flags for a fixture directory holding `sys/` and rootfs content.
fn tree_args(root: &Path) -> Vec<String> {
    vec![
        "--collector.disable-defaults".into(),
        "--collector.mic".into(),
        format!("--path.sysfs={}", root.join("sys").display()),
        format!("--path.rootfs={}", root.display()),
    ]
}

fn start(root: &Path, extra: &[&str]) -> Exporter {
    let mut args = tree_args(root);
    args.extend(extra.iter().map(|s| s.to_string()));
    Exporter::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The value of the one sample line that starts with `series` (name and labels).
fn value(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "{series}: {lines:?}");
    lines[0][prefix.len()..].parse().unwrap()
}

fn error_count(text: &str, kind: &str) -> f64 {
    value(
        text,
        &format!("hpcnode_collector_errors_total{{collector=\"mic\",kind=\"{kind}\"}}"),
    )
}

/// The ten value lines of one capture in `micras-power-knc.txt` (real card-side readings).
fn power_capture(name: &str) -> Vec<String> {
    let text =
        fs::read_to_string(fixture_root("mic_captures").join("micras-power-knc.txt")).unwrap();
    match name {
        "A" => text
            .lines()
            .skip_while(|l| !l.starts_with("# CAPTURE A"))
            .skip(1)
            .take_while(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect(),
        // Capture B is quoted on one comment line, values separated by " / ".
        _ => {
            let start = text.find("# 104000000").unwrap();
            let mut values = String::new();
            for line in text[start..].lines().take(2) {
                values.push_str(line.trim_start_matches("# "));
                values.push(' ');
            }
            values
                .split(" / ")
                .map(|v| v.trim().trim_matches('"').to_string())
                .filter(|v| !v.is_empty())
                .collect()
        }
    }
}

/// `Name : <number> <unit>` from the real micinfo capture.
fn micinfo(name: &str) -> f64 {
    let text =
        fs::read_to_string(fixture_root("mic_captures").join("micinfo-mpss3.8.2-x100-7120P.txt"))
            .unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(name) && l.contains(" : "))
        .unwrap_or_else(|| panic!("{name} not in the micinfo capture"));
    let value = line.split(" : ").nth(1).unwrap();
    value.split_whitespace().next().unwrap().parse().unwrap()
}

/// The exported power readings of a card equal the capture's lines, in watts, and the
/// connectors add up to the instantaneous power (the capture's own consistency check).
fn assert_power_round_trips(text: &str, device: &str, capture: &[String]) {
    let power = |reading: &str| {
        value(
            text,
            &format!("hpcnode_mic_power_watts{{device=\"{device}\",reading=\"{reading}\",source=\"micras\"}}"),
        )
    };
    let readings = [
        "total_window0",
        "total_window1",
        "instantaneous",
        "instantaneous_max",
        "pcie",
        "connector_2x3",
        "connector_2x4",
    ];
    assert_eq!(capture.len(), 10, "{capture:?}");
    for (reading, line) in readings.iter().zip(capture) {
        let microwatts: f64 = line.parse().unwrap();
        assert_eq!(power(reading) * 1e6, microwatts, "{reading}");
    }
    assert_eq!(
        power("pcie") + power("connector_2x3") + power("connector_2x4"),
        power("instantaneous")
    );
    for (rail, line) in ["vccp", "vddg", "vddq"].iter().zip(&capture[7..]) {
        let fields: Vec<f64> = line.split(' ').map(|f| f.parse().unwrap()).collect();
        for (metric, field) in [
            ("hpcnode_mic_rail_power_watts", fields[0]),
            ("hpcnode_mic_rail_current_amperes", fields[1]),
            ("hpcnode_mic_rail_voltage_volts", fields[2]),
        ] {
            let series =
                format!("{metric}{{device=\"{device}\",rail=\"{rail}\",source=\"micras\"}}");
            assert!(
                (value(text, &series) * 1e6 - field).abs() < 1e-3,
                "{series}"
            );
        }
    }
}

const MIC0_MICRAS: &str = "--collector.mic.micras-path=mic0=/var/lib/micras/mic0";
const NO_LIBRARY: &str = "--no-collector.mic.libmicmgmt";

#[test]
fn mpss3_host_with_an_online_and_a_booting_card() {
    let exporter = start(&fixture_root("mic_mpss3"), &[NO_LIBRARY, MIC0_MICRAS]);
    let text = check_fixture_output("mic_mpss3", &exporter);

    assert!(text.contains("hpcnode_mic_card_state{device=\"mic0\",state=\"online\"} 1\n"));
    assert!(text.contains("hpcnode_mic_card_state{device=\"mic1\",state=\"booting\"} 1\n"));
    // One series per possible state, exactly one of them 1.
    let mic1_states: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hpcnode_mic_card_state{device=\"mic1\""))
        .collect();
    assert_eq!(mic1_states.len(), 10);
    assert_eq!(mic1_states.iter().filter(|l| l.ends_with(" 1")).count(), 1);
    assert!(text.contains("hpcnode_mic_card_post_code_info{device=\"mic1\",post_code=\"3C\"} 1\n"));
    assert!(text.contains("hpcnode_mic_card_crashes_total{device=\"mic1\"} 1\n"));
    // `ctrl` and `scif` are not cards.
    assert!(!text.contains("device=\"ctrl\"") && !text.contains("device=\"scif\""));
    assert!(text.contains("mpss_version=\"3.8.2-1\""));
    // `flashversion` is the flash's build in hex: mic0's `187` is the capture's 2.1.02.0391.
    let capture =
        fs::read_to_string(fixture_root("mic_captures").join("micinfo-mpss3.8.2-x100-7120P.txt"))
            .unwrap();
    let flash = capture
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Flash Version"))
        .and_then(|l| l.rsplit('.').next())
        .unwrap();
    let build: u32 = flash.trim().parse().unwrap();
    for (card, build) in [("mic0", build), ("mic1", 386)] {
        let info = text
            .lines()
            .find(|l| l.starts_with(&format!("hpcnode_mic_card_info{{device=\"{card}\"")))
            .unwrap();
        assert!(
            info.contains(&format!("flash_version=\"{build}\"")),
            "{info}"
        );
    }

    assert_power_round_trips(&text, "mic0", &power_capture("A"));
    assert_eq!(
        value(
            &text,
            "hpcnode_mic_temperature_celsius{device=\"mic0\",sensor=\"die\",source=\"micras\"}"
        ),
        micinfo("Die Temp")
    );
    // Only mic0 has micras files; the booting card has no telemetry and that is no error.
    assert!(!text
        .lines()
        .any(|l| l.starts_with("hpcnode_mic_temperature") && l.contains("mic1")));
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"mic\"} 1\n"));
    assert!(errors_total(&text, "mic") == 0, "{text}");
}

#[test]
fn mpss4_host() {
    let exporter = start(&fixture_root("mic_mpss4"), &[NO_LIBRARY]);
    let text = check_fixture_output("mic_mpss4", &exporter);
    assert!(text.contains("hpcnode_mic_card_state{device=\"mic0\",state=\"online\"} 1\n"));
    assert!(text.contains("hpcnode_mic_card_state{device=\"mic1\",state=\"error\"} 1\n"));
    assert!(text.contains("hpcnode_mic_card_state{device=\"mic1\",state=\"booting_firmware\"} 0\n"));
    // The x200 flash is its BIOS; `<empty>` (no DMI tables from the card yet) is no version.
    assert!(text.contains("flash_version=\"GVPRCRB8.86B.0015.D07.1705120331\""));
    assert!(text.contains("device=\"mic1\",family=\"x200\",stepping=\"B0\",sku=\"\",serial_number=\"\",mode=\"\",flash_version=\"\""));
    // `0x3c` under MPSS 4 reads as the MPSS 3 form.
    assert!(text.contains("hpcnode_mic_card_post_code_info{device=\"mic1\",post_code=\"3C\"} 1\n"));
    // MPSS 4 has no boot or crash counts in sysfs: nothing, and no error.
    assert!(!text.contains("hpcnode_mic_card_boots_total"));
    assert!(errors_total(&text, "mic") == 0, "{text}");
}

#[test]
fn card_side_micras() {
    let exporter = start(&fixture_root("mic_card"), &[NO_LIBRARY]);
    let text = check_fixture_output("mic_card", &exporter);
    assert_power_round_trips(&text, "local", &power_capture("B"));
    // Status 3 (unavailable): the status is exported, the meaningless temperature is not.
    assert!(text.contains(
        "hpcnode_mic_temperature_status{device=\"local\",sensor=\"vddq\",source=\"micras\"} 3\n"
    ));
    assert!(!text.contains("hpcnode_mic_temperature_celsius{device=\"local\",sensor=\"vddq\""));
    assert!(text.contains("hpcnode_mic_fan_rpm{device=\"local\",source=\"micras\"} 2700\n"));
    assert!(text.contains("hpcnode_mic_power_limit_watts{device=\"local\",limit=\"physical\",source=\"micras\"} 300\n"));
    assert!(errors_total(&text, "mic") == 0, "{text}");
}

#[test]
fn no_card_is_silent() {
    let empty = tempfile::tempdir().unwrap();
    // A sysfs without the mic driver's class (an empty one is no sysfs: a config error).
    fs::create_dir_all(empty.path().join("sys/class")).unwrap();
    // The library source is on: with no card it is never loaded, so it cannot complain.
    let exporter = start(empty.path(), &[]);
    let text = scrape(&exporter);
    assert!(!text.contains("hpcnode_mic_"), "{text}");
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"mic\"} 1\n"));
    assert!(errors_total(&text, "mic") == 0);
    assert!(
        !exporter.log().contains("collector=mic"),
        "{}",
        exporter.log()
    );
}

/// Garbage lines, short files, an unknown state, a FIFO where the post code belongs, a micras
/// directory that is missing: each is reported once per cause, the good card is untouched.
#[test]
fn bad_input_is_reported_and_the_rest_exported() {
    let tree = TreeCopy::with_rootfs("mic_bad");
    let post_code = tree.sys().join("class/mic/mic1/post_code");
    let c_path = std::ffi::CString::new(post_code.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    let exporter = start(
        tree.dir.path(),
        &[
            NO_LIBRARY,
            "--collector.mic.micras-path=mic1=/var/lib/micras/mic1",
            "--collector.mic.micras-path=mic2=/var/lib/micras/mic2",
        ],
    );
    let text = check_fixture_output("mic_bad", &exporter);

    let good: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("device=\"mic0\""))
        .collect();
    assert!(good.contains(&"hpcnode_mic_card_state{device=\"mic0\",state=\"online\"} 1"));
    assert!(good.contains(&"hpcnode_mic_card_post_code_info{device=\"mic0\",post_code=\"FF\"} 1"));
    // What parsed on the broken card is still there.
    assert!(text.contains(
        "hpcnode_mic_temperature_celsius{device=\"mic1\",sensor=\"die\",source=\"micras\"} 50.0\n"
    ));
    assert!(text.contains(
        "hpcnode_mic_power_watts{device=\"mic1\",reading=\"pcie\",source=\"micras\"} 38.0\n"
    ));
    assert!(text.contains(
        "hpcnode_mic_core_frequency_hertz{device=\"mic1\",source=\"micras\"} 1238095000.0\n"
    ));
    assert!(!text.contains("hpcnode_mic_card_state{device=\"mic1\""));
    assert!(text.contains("hpcnode_mic_source_available{device=\"mic2\",source=\"micras\"} 0\n"));
    assert!(text.contains("hpcnode_scrape_collector_success{collector=\"mic\"} 1\n"));

    // Two more scrapes: four in all (the golden check read both formats).
    scrape(&exporter);
    let fourth = scrape(&exporter);
    // Per scrape: state, boot_count, crash_count, flashversion; temp banana, status 7, short
    // line, short file; power short file; volt; plim.
    assert_eq!(error_count(&fourth, "parse"), 4.0 * 11.0);
    assert_eq!(error_count(&fourth, "not_regular_file"), 4.0);
    assert_eq!(error_count(&fourth, "io"), 4.0);
    for cause in [
        "mic1/state: unknown state (8 bytes)",
        "mic1/boot_count: not an unsigned integer",
        "mic1/flashversion: not a hex build number",
        "mic1/post_code: not a regular file",
        "mic1/temp: expected unsigned numbers (6 bytes)",
        "mic1/temp: status not 0-3",
        "mic1/temp: fewer lines than the driver prints",
        "mic1/power: fewer lines than the driver prints",
        "mic1/volt: expected unsigned numbers",
        "mic1/plim: expected unsigned numbers",
        "micras/mic2: No such file or directory",
    ] {
        let log = exporter.log_with(cause);
        assert_eq!(log.matches(cause).count(), 1, "{cause:?} in log:\n{log}");
    }
    // Named and counted, never quoted.
    let log = exporter.log();
    assert!(
        !log.contains("sleeping") && !log.contains("banana"),
        "{log}"
    );
}

/// The fake libmicmgmt, compiled into a temporary directory readable by everyone.
fn fake_library(defines: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let output = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wall", "-Werror", "-o"])
        .arg(dir.path().join("libmicmgmt.so.0"))
        .arg(support("fake_libmicmgmt.c"))
        .args(defines)
        .output()
        .expect("gcc is required for the libmicmgmt tests");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// libmicmgmt is read only by root: where the tests are not root, say so (CI is root).
fn root_or_skip(test: &str) -> bool {
    if is_root() {
        return true;
    }
    let why = "libmicmgmt is used only when the exporter runs as root";
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} must run in CI: {why}"
    );
    eprintln!("SKIPPED {test}: {why}");
    false
}

fn start_with_library(
    root: &Path,
    library_dir: &Path,
    uid: Option<u32>,
    extra: &[&str],
) -> Exporter {
    let mut args = tree_args(root);
    args.push(MIC0_MICRAS.into());
    args.extend(extra.iter().map(|s| s.to_string()));
    Exporter::start_with_env(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        uid,
        &[("LD_LIBRARY_PATH", library_dir)],
    )
}

#[test]
fn libmicmgmt_readings_come_first_and_once() {
    if !root_or_skip("libmicmgmt_readings_come_first_and_once") {
        return;
    }
    let library = fake_library(&[]);
    let exporter = start_with_library(&fixture_root("mic_mpss3"), library.path(), None, &[]);
    let text = check_fixture_output("mic_mpss3_libmicmgmt", &exporter);

    // The values micinfo printed from the same calls, in base units.
    let series = |metric: &str, extra: &str| {
        format!("{metric}{{device=\"mic0\",{extra}source=\"libmicmgmt\"}}")
    };
    assert_eq!(
        value(
            &text,
            &series("hpcnode_mic_temperature_celsius", "sensor=\"die\",")
        ),
        micinfo("Die Temp")
    );
    assert_eq!(
        value(&text, &series("hpcnode_mic_core_voltage_volts", "")),
        micinfo("Voltage") / 1e6
    );
    assert_eq!(
        value(&text, &series("hpcnode_mic_core_frequency_hertz", "")),
        micinfo("Frequency") * 1e3
    );
    assert_eq!(
        value(&text, &series("hpcnode_mic_memory_voltage_volts", "")),
        micinfo("GDDR Voltage") / 1e6
    );
    // Each reading once: the library's die temperature hides the micras copy's.
    assert!(!text.contains("sensor=\"die\",source=\"micras\""));
    // What only micras has (the board sensor, the maximum power, the limits) comes from it.
    assert!(text.contains("hpcnode_mic_power_watts{device=\"mic0\",reading=\"instantaneous_max\",source=\"micras\"} 129.0\n"));
    assert!(text.contains(
        "hpcnode_mic_temperature_celsius{device=\"mic0\",sensor=\"board\",source=\"micras\"} 0.0\n"
    ));
    // The library's vddq sensor is invalid: its status is 3, its temperature comes from micras.
    assert!(text.contains(
        "hpcnode_mic_temperature_status{device=\"mic0\",sensor=\"vddq\",source=\"libmicmgmt\"} 3\n"
    ));
    assert!(
        text.contains("hpcnode_mic_source_available{device=\"mic0\",source=\"libmicmgmt\"} 1\n")
    );
    // A booting card is not asked.
    assert!(
        text.contains("hpcnode_mic_source_available{device=\"mic1\",source=\"libmicmgmt\"} 0\n")
    );
    assert!(errors_total(&text, "mic") == 0, "{text}");
    // Scraped again: the library refuses a list, device or info structure asked for again
    // without being freed or closed, so a clean page now says every one of them was.
    let again = scrape(&exporter);
    assert!(
        again.contains("hpcnode_mic_source_available{device=\"mic0\",source=\"libmicmgmt\"} 1\n")
    );
    assert!(errors_total(&again, "mic") == 0, "{again}");
}

#[test]
fn library_missing_a_symbol_is_reported_once_and_sysfs_kept() {
    if !root_or_skip("library_missing_a_symbol_is_reported_once_and_sysfs_kept") {
        return;
    }
    let library = fake_library(&["-DWITHOUT_CORES_FREQUENCY"]);
    let exporter = start_with_library(&fixture_root("mic_mpss3"), library.path(), None, &[]);
    scrape(&exporter);
    scrape(&exporter);
    let text = scrape(&exporter);
    assert!(
        text.contains("hpcnode_mic_source_available{device=\"mic0\",source=\"libmicmgmt\"} 0\n")
    );
    assert!(text.contains("hpcnode_mic_card_state{device=\"mic0\",state=\"online\"} 1\n"));
    assert!(text.contains(
        "hpcnode_mic_temperature_celsius{device=\"mic0\",sensor=\"die\",source=\"micras\"} 50.0\n"
    ));
    assert!(
        !text.lines().any(|l| l.contains("source=\"libmicmgmt\"")
            && !l.starts_with("hpcnode_mic_source_available")),
        "{text}"
    );
    // An unusable library makes the source unavailable; it is no read failure.
    assert!(errors_total(&text, "mic") == 0, "{text}");
    let cause = "libmicmgmt.so.0 lacks the symbol mic_get_cores_frequency";
    let log = exporter.log_with(cause);
    assert_eq!(log.matches(cause).count(), 1, "{log}");
}

/// A node without MPSS's libmicmgmt: the source is unavailable, which the metric says every
/// scrape and the log once, and which is no collector error (the cards' sysfs and micras
/// readings are all there).
#[test]
fn missing_library_is_unavailable_not_an_error() {
    let empty = tempfile::tempdir().unwrap();
    let exporter = start_with_library(&fixture_root("mic_mpss3"), empty.path(), None, &[]);
    scrape(&exporter);
    let text = scrape(&exporter);
    for card in ["mic0", "mic1"] {
        let series =
            format!("hpcnode_mic_source_available{{device=\"{card}\",source=\"libmicmgmt\"}} 0\n");
        assert!(text.contains(&series), "{text}");
    }
    assert!(
        text.contains("hpcnode_mic_core_voltage_volts{device=\"mic0\",source=\"micras\"} 1.041\n")
    );
    assert!(errors_total(&text, "mic") == 0, "{text}");
    let line = "libmicmgmt unavailable";
    let log = exporter.log_with(line);
    assert_eq!(log.matches(line).count(), 1, "{log}");
    assert!(!log.contains("collector error"), "{log}");
}

/// Without root the library is not even loaded, and the metric and one log line say so. Run as
/// nobody where the tests are root, as the test user elsewhere.
#[test]
fn library_needs_root() {
    let library = fake_library(&[]);
    let tree = TreeCopy::with_rootfs("mic_mpss3");
    fs::set_permissions(tree.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let uid = is_root().then_some(65534);
    let exporter = start_with_library(tree.dir.path(), library.path(), uid, &[]);
    scrape(&exporter);
    let text = scrape(&exporter);
    assert!(
        text.contains("hpcnode_mic_source_available{device=\"mic0\",source=\"libmicmgmt\"} 0\n")
    );
    assert!(
        text.contains("hpcnode_mic_source_available{device=\"mic1\",source=\"libmicmgmt\"} 0\n")
    );
    assert!(
        text.contains("hpcnode_mic_core_voltage_volts{device=\"mic0\",source=\"micras\"} 1.041\n")
    );
    assert!(errors_total(&text, "mic") == 0, "{text}");
    let cause = "reading cards over SCIF needs root";
    let log = exporter.log_with(cause);
    assert_eq!(log.matches(cause).count(), 1, "{log}");
}

/// A library call that never returns (a card that stopped answering over SCIF) holds only its
/// card: the scrape answers by the deadline, the card is skipped until the call returns, the
/// other card is still read, and no thread is started for it again.
#[test]
fn hung_library_call_is_bounded() {
    if !root_or_skip("hung_library_call_is_bounded") {
        return;
    }
    let library = fake_library(&["-DHANG_IN_THERMAL"]);
    let exporter = start_with_library(
        &fixture_root("mic_mpss3"),
        library.path(),
        None,
        &["--scrape.timeout=500ms"],
    );
    let mut threads = Vec::new();
    for attempt in 0..5 {
        let started = std::time::Instant::now();
        let text = scrape(&exporter);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "scrape waited on a hung library call"
        );
        assert!(text.contains("hpcnode_scrape_collector_success{collector=\"mic\"} 0\n"));
        // From the second scrape on the hung card is skipped (in the first, a one-CPU machine
        // has no second worker for the other card).
        if attempt > 0 {
            assert!(text.contains("hpcnode_mic_card_state{device=\"mic1\",state=\"booting\"} 1\n"));
            assert!(!text.contains("device=\"mic0\""));
        }
        threads.push(exporter.threads());
    }
    let text = scrape(&exporter);
    assert_eq!(error_count(&text, "timeout"), 1.0);
    assert_eq!(error_count(&text, "still_running"), 5.0);
    let most = *threads.iter().max().unwrap();
    assert!(most <= threads[0] + 3, "threads grew: {threads:?}");
}

/// Calls are serialised (the library keeps global state): a call that never returns on one
/// online card must not hold the other online card's read forever, or that card's host state
/// (what says why the first one hangs) would vanish with it. The card waiting for its turn gives
/// up, says so, and exports its sysfs readings.
#[test]
fn hung_library_call_holds_only_its_own_card() {
    if !root_or_skip("hung_library_call_holds_only_its_own_card") {
        return;
    }
    let library = fake_library(&["-DHANG_IN_THERMAL"]);
    let tree = TreeCopy::with_rootfs("mic_mpss3");
    fs::write(tree.sys().join("class/mic/mic1/state"), "online\n").unwrap();
    let exporter = start_with_library(
        tree.dir.path(),
        library.path(),
        None,
        &["--scrape.timeout=500ms"],
    );
    scrape(&exporter);
    for _ in 0..3 {
        let text = scrape(&exporter);
        let online: Vec<&str> = ["mic0", "mic1"]
            .into_iter()
            .filter(|card| {
                text.contains(&format!(
                    "hpcnode_mic_card_state{{device=\"{card}\",state=\"online\"}} 1\n"
                ))
            })
            .collect();
        assert_eq!(online.len(), 1, "one card hangs, the other is read: {text}");
        assert!(text.contains(&format!(
            "hpcnode_mic_source_available{{device=\"{}\",source=\"libmicmgmt\"}} 0\n",
            online[0]
        )));
    }
    let cause = "libmicmgmt.so.0 busy";
    let log = exporter.log_with(cause);
    assert_eq!(log.matches(cause).count(), 1, "{log}");
}

/// micras prints temperatures with `%u`: a number wider than 32 bits is not the driver's and is
/// reported, not wrapped into a plausible reading (2^32 would read as 0 C).
#[test]
fn temperature_wider_than_the_driver_prints_is_reported() {
    let tree = TreeCopy::with_rootfs("mic_card");
    let temp = tree.sys().join("class/micras/temp");
    let text = fs::read_to_string(&temp).unwrap();
    fs::write(&temp, text.replacen("48 0", "4294967296 0", 1)).unwrap();
    let exporter = start(tree.dir.path(), &[NO_LIBRARY]);
    let text = scrape(&exporter);
    assert!(!text.contains("hpcnode_mic_temperature_celsius{device=\"local\",sensor=\"die\""));
    assert!(text.contains(
        "hpcnode_mic_temperature_celsius{device=\"local\",sensor=\"board\",source=\"micras\"} 0.0\n"
    ));
    assert_eq!(error_count(&text, "parse"), 1.0);
    let cause = "micras/temp: temperature wider than 32 bits";
    let log = exporter.log_with(cause);
    assert_eq!(log.matches(cause).count(), 1, "{log}");
}
