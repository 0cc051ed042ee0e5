//! Xeon Phi (MIC) collector: card state, post code, boot and crash counts from the host's
//! `/sys/class/mic` (MPSS 3 and MPSS 4 forms), and temperatures, voltages, frequencies and power
//! from the card's micras files and from libmicmgmt.
//!
//! One unit per card. Sources, each optional, are combined per card:
//! - host sysfs `class/mic/micN/`: state, post code, counts, identity (no telemetry there);
//! - micras files: `class/micras/` when the exporter runs on the card itself (card `local`), or
//!   a copy per card given with `--collector.mic.micras-path=micN=DIR`;
//! - `libmicmgmt.so.0`, loaded at run time (never linked) and asked over SCIF, as `micinfo` does;
//!   root only, and only for cards that are `online` (a card that is not up cannot answer).
//!
//! The same reading from two sources is exported once: libmicmgmt first (it is asked live at
//! scrape time, while a micras copy may be stale), then micras for what the library did not give.
//! Every sample carries `source` to say where it came from.

mod libmicmgmt;
pub(crate) mod micras;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::collector::{
    CollectError, Collector, Host, Output, Registration, Root, Settings, StartError, Started,
};
use crate::flags::{optional, toggle, ConfigError, Flags};
use crate::metrics::{Desc, LabelValue, Labels, Value};
use crate::sysfs::{AttributeReader, Entry, SysDir, SysfsError};
use libmicmgmt::LibrarySource;

/// The unit name of the card the exporter runs on (`class/micras` present).
const LOCAL_CARD: &str = "local";
/// Under `--path.sysfs`: the host driver's cards, and the card's own micras files.
const CLASS_DIR: &str = "class/mic";
const LOCAL_MICRAS_DIR: &str = "class/micras";
const SOURCE_LIBRARY: &str = "libmicmgmt";
const SOURCE_MICRAS: &str = "micras";

pub const REGISTRATION: Registration = Registration {
    name: "mic",
    enabled_by_default: true,
    help: "Xeon Phi (MIC) card state, boot and crash counts from /sys/class/mic; temperatures, voltages and power from micras files and libmicmgmt",
    metrics: &METRICS,
    roots: &[Root::Sysfs, Root::Rootfs],
    flags: || {
        let mut flags = vec![optional(MICRAS_PATH, "micN=DIR", "Directory holding a copy of card micN's /sys/class/micras files (absolute, read below --path.rootfs). Repeat once per card.")
            .action(clap::ArgAction::Append)];
        flags.extend(toggle(
            LIBMICMGMT,
            "Read card telemetry over SCIF with libmicmgmt.so.0, loaded at run time; needs root (default: enabled).",
            "Do not load libmicmgmt.",
        ));
        flags
    },
    configure: |flags| Ok(Box::new(MicSettings::from_flags(flags)?)),
    probe: None,
};

const MICRAS_PATH: &str = "collector.mic.micras-path";
const LIBMICMGMT: &str = "collector.mic.libmicmgmt";

#[derive(Debug)]
struct MicSettings {
    /// Per-card directories of copied-out micras files, below `rootfs`, sorted by card.
    micras_paths: Vec<MicrasPath>,
    /// Whether to ask libmicmgmt (root only) for card telemetry.
    libmicmgmt: bool,
}

impl MicSettings {
    fn from_flags(flags: &Flags) -> Result<MicSettings, ConfigError> {
        Ok(MicSettings {
            micras_paths: parse_micras_paths(flags)?,
            libmicmgmt: flags.toggled(LIBMICMGMT).unwrap_or(true),
        })
    }
}

impl Settings for MicSettings {
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError> {
        Ok(Started::new(MicCollector {
            sysfs: host.sysfs.clone(),
            rootfs: host.rootfs.clone(),
            micras_paths: self
                .micras_paths
                .into_iter()
                .map(|path| {
                    let relative = path.dir.strip_prefix("/").unwrap_or(&path.dir);
                    (path.card, relative.to_path_buf())
                })
                .collect(),
            // Half the deadline: a card waiting for its turn still has time to send what it read.
            library: self
                .libmicmgmt
                .then(|| LibrarySource::start(host.scrape_timeout / 2)),
        }))
    }
}

/// One `--collector.mic.micras-path=micN=DIR`: where card `micN`'s micras files were copied.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MicrasPath {
    card: String,
    /// Absolute as given; the collector reads it below `--path.rootfs`.
    dir: PathBuf,
}

/// Card names as the host driver spells them (`mic0`), each card at most once.
fn parse_micras_paths(flags: &Flags) -> Result<Vec<MicrasPath>, ConfigError> {
    let values = flags.values(MICRAS_PATH);
    let mut paths: Vec<MicrasPath> = Vec::new();
    for value in &values {
        let invalid = |reason| flags.invalid(MICRAS_PATH, value, reason);
        let (card, dir) = value
            .split_once('=')
            .ok_or_else(|| invalid("expected micN=DIR"))?;
        let number = card
            .strip_prefix("mic")
            .ok_or_else(|| invalid("the card must be named micN, as in /sys/class/mic"))?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("the card must be named micN, as in /sys/class/mic"));
        }
        if !dir.starts_with('/') {
            return Err(invalid("DIR must be an absolute path"));
        }
        if paths.iter().any(|path| path.card == card) {
            return Err(invalid("a card may be given only once"));
        }
        paths.push(MicrasPath {
            card: card.to_string(),
            dir: PathBuf::from(dir),
        });
    }
    paths.sort_by(|a, b| a.card.cmp(&b.card));
    Ok(paths)
}

struct MicCollector {
    sysfs: PathBuf,
    rootfs: PathBuf,
    /// Per card, its micras copy's directory relative to `rootfs`.
    micras_paths: Vec<(String, PathBuf)>,
    library: Option<LibrarySource>,
}

const CARD_INFO: Desc = Desc::gauge(
    "hpcnode_mic_card_info",
    "Xeon Phi card identity: family, stepping, SKU, serial number, boot mode, flash version and the host's MPSS version.",
    None,
);
const CARD_STATE: Desc = Desc::gauge(
    "hpcnode_mic_card_state",
    "Card state as the host driver reports it: one series per possible state, 1 for the current one.",
    None,
);
const CARD_POST_CODE: Desc = Desc::gauge(
    "hpcnode_mic_card_post_code_info",
    "The card's last POST code (two hex digits; FF once booted).",
    None,
);
const CARD_BOOTS: Desc = Desc::counter(
    "hpcnode_mic_card_boots",
    "Boots of the card since the host driver loaded.",
    None,
);
const CARD_CRASHES: Desc = Desc::counter(
    "hpcnode_mic_card_crashes",
    "Crashes of the card's OS since the host driver loaded.",
    None,
);
const SCIF_STATE: Desc = Desc::gauge(
    "hpcnode_mic_card_scif_state",
    "SCIF link state of the card: one series per possible state, 1 for the current one.",
    None,
);
const SOURCE_AVAILABLE: Desc = Desc::gauge(
    "hpcnode_mic_source_available",
    "1 when the source (micras, libmicmgmt) gave this card's readings in this scrape, 0 when it is configured but could not.",
    None,
);
const TEMPERATURE: Desc = Desc::gauge(
    "hpcnode_mic_temperature",
    "Card temperature by sensor.",
    Some("celsius"),
);
const TEMPERATURE_STATUS: Desc = Desc::gauge(
    "hpcnode_mic_temperature_status",
    "Temperature sensor status: 0 ok, 1 above its upper threshold, 2 below its lower threshold, 3 unavailable.",
    None,
);
const POWER: Desc = Desc::gauge(
    "hpcnode_mic_power",
    "Card power by reading: totals over the two averaging windows, instantaneous, its maximum, and per connector.",
    Some("watts"),
);
const RAIL_POWER: Desc = Desc::gauge(
    "hpcnode_mic_rail_power",
    "Power of a voltage rail (vccp core, vddg uncore, vddq memory).",
    Some("watts"),
);
const RAIL_CURRENT: Desc = Desc::gauge(
    "hpcnode_mic_rail_current",
    "Current of a voltage rail.",
    Some("amperes"),
);
const RAIL_VOLTAGE: Desc = Desc::gauge(
    "hpcnode_mic_rail_voltage",
    "Voltage of a voltage rail.",
    Some("volts"),
);
const CORE_VOLTAGE: Desc = Desc::gauge(
    "hpcnode_mic_core_voltage",
    "Current core voltage.",
    Some("volts"),
);
const CORE_FREQUENCY: Desc = Desc::gauge(
    "hpcnode_mic_core_frequency",
    "Current core frequency.",
    Some("hertz"),
);
const MEMORY_VOLTAGE: Desc = Desc::gauge(
    "hpcnode_mic_memory_voltage",
    "Current GDDR voltage.",
    Some("volts"),
);
const MEMORY_FREQUENCY: Desc = Desc::gauge(
    "hpcnode_mic_memory_frequency",
    "Current GDDR frequency.",
    Some("hertz"),
);
const POWER_LIMIT: Desc = Desc::gauge(
    "hpcnode_mic_power_limit",
    "Card power limits: physical, and the high and low marks of power management.",
    Some("watts"),
);
const FAN_SPEED: Desc = Desc::gauge("hpcnode_mic_fan", "Fan speed.", Some("rpm"));

/// Every metric this collector emits (for the METRICS.md check).
pub const METRICS: [Desc; 19] = [
    CARD_INFO,
    CARD_STATE,
    CARD_POST_CODE,
    CARD_BOOTS,
    CARD_CRASHES,
    SCIF_STATE,
    SOURCE_AVAILABLE,
    TEMPERATURE,
    TEMPERATURE_STATUS,
    POWER,
    RAIL_POWER,
    RAIL_CURRENT,
    RAIL_VOLTAGE,
    CORE_VOLTAGE,
    CORE_FREQUENCY,
    MEMORY_VOLTAGE,
    MEMORY_FREQUENCY,
    POWER_LIMIT,
    FAN_SPEED,
];

/// `state` values of the MPSS 3 host driver (x100), `mpss3/mpss-modules/host/linsysfs.c`.
const MPSS3_STATES: [&str; 10] = [
    "ready",
    "booting",
    "no response",
    "boot failed",
    "online",
    "shutdown",
    "lost",
    "resetting",
    "reset failed",
    "invalid",
];
/// `state` values of MPSS 4 (x200, `cosm_main.c`) and the upstream kernel ABI (`reset_failed`).
const MPSS4_STATES: [&str; 11] = [
    "ready",
    "online",
    "online_firmware",
    "shutdown",
    "error",
    "unknown",
    "resetting",
    "reset_failed",
    "shutting_down",
    "booting",
    "booting_firmware",
];
const SCIF_STATES: [&str; 6] = [
    "not present",
    "initializing",
    "online",
    "sleeping",
    "stopping",
    "stopped",
];
/// micras `temp` status codes run 0..=3.
const UNAVAILABLE: u64 = 3;

fn card_number(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("mic")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl Collector for MicCollector {
    /// A card; an entry whose name is not UTF-8 is a unit of its own, which reports it.
    type Unit = Entry;

    fn units(&self) -> Result<Vec<Entry>, CollectError> {
        let listing = SysDir::open(&self.sysfs, CLASS_DIR).and_then(|d| d.entries());
        let mut cards: Vec<Entry> = match listing {
            // `ctrl` and `scif` sit beside the cards.
            Ok(entries) => entries
                .into_iter()
                .filter(|entry| {
                    entry
                        .name()
                        .map_or(true, |name| card_number(name).is_some())
                })
                .collect(),
            // No MPSS host driver: no cards, and nothing failed.
            Err(err) if err.is_absent() => Vec::new(),
            Err(err) => return Err(err.into()),
        };
        for (card, _) in &self.micras_paths {
            let card = Entry::Name(card.clone());
            if !cards.contains(&card) {
                cards.push(card);
            }
        }
        // By number; entries without a usable name after the cards.
        cards.sort_by_key(|card| match card {
            Entry::Name(name) => (false, card_number(name)),
            Entry::NotUtf8 { .. } => (true, None),
        });
        match SysDir::open(&self.sysfs, LOCAL_MICRAS_DIR) {
            Ok(_) => cards.push(Entry::Name(LOCAL_CARD.to_string())),
            Err(err) if err.is_absent() => {}
            Err(err) => return Err(err.into()),
        }
        Ok(cards)
    }

    fn collect_unit(&self, card: &Entry, out: &mut Output) {
        let Some(card) = out.reported(card.name()) else {
            return;
        };
        let mut read = CardRead {
            reader: AttributeReader::default(),
            out,
            device: card.to_string().into(),
            seen: HashSet::new(),
        };
        // A card the host driver lists: its number, and its state when it could be read.
        let mut host_card = None;
        if let Some(number) = card_number(card) {
            // Absent for a card known only from its micras copy.
            let dir = SysDir::open(&self.sysfs, format!("{CLASS_DIR}/{card}"));
            if let Some(dir) = read.out.optional(dir) {
                let version = self.mpss_version(&mut read);
                host_card = Some((number, read.host(&dir, version)));
            }
        }
        if let (Some(library), Some((number, state))) = (&self.library, &host_card) {
            let online = state.as_deref() == Some("online");
            let available = read.library(library, *number, online);
            read.source_available(SOURCE_LIBRARY, available);
        }
        let micras = if card == LOCAL_CARD {
            Some((&self.sysfs, Path::new(LOCAL_MICRAS_DIR)))
        } else {
            self.micras_paths
                .iter()
                .find(|(name, _)| name == card)
                .map(|(_, dir)| (&self.rootfs, dir.as_path()))
        };
        if let Some((root, relative)) = micras {
            let dir = read.out.reported(SysDir::open(root, relative));
            if let Some(dir) = &dir {
                read.micras(dir);
            }
            read.source_available(SOURCE_MICRAS, dir.is_some());
        }
    }
}

impl MicCollector {
    /// `class/mic/ctrl/version`: the host's MPSS version, "" when absent.
    fn mpss_version(&self, read: &mut CardRead) -> String {
        read.out
            .optional(SysDir::open(&self.sysfs, format!("{CLASS_DIR}/ctrl")))
            .and_then(|ctrl| read.optional_text(&ctrl, "version"))
            .unwrap_or_default()
    }
}

/// Which sensor, reading, rail or limit a reading is: its label and value (`None` for a
/// card-wide reading such as the core voltage).
type ReadingKind = Option<(&'static str, &'static str)>;

/// One card's read: the read buffer, where samples and errors go, and which readings some
/// source has already given (the first source of a reading wins).
struct CardRead<'a> {
    reader: AttributeReader,
    out: &'a mut Output,
    device: LabelValue,
    seen: HashSet<(&'static str, &'static str)>,
}

impl CardRead<'_> {
    fn error(&mut self, err: impl Into<CollectError>) {
        self.out.errors.push(err.into());
    }

    fn labels(&self) -> Labels {
        vec![("device", self.device.clone())]
    }

    /// An optional attribute: `None` when absent or broken (then reported).
    fn optional_text(&mut self, dir: &SysDir, name: &str) -> Option<String> {
        let text = self.out.optional(dir.read(name, &mut self.reader));
        text.map(str::to_string)
    }

    fn optional_count(&mut self, dir: &SysDir, name: &str, desc: &Desc) {
        if let Some(count) = self.out.optional(dir.read_u64(name, &mut self.reader)) {
            let labels = self.labels();
            self.out.samples.push(desc, labels, Value::Int(count));
        }
    }

    /// One series per possible state, 1 for the current one; an unknown state is reported.
    fn state_set(&mut self, desc: &Desc, states: &[&'static str], current: &str, path: &Path) {
        if !states.contains(&current) {
            return self.error(SysfsError::parse(path, "unknown state", current));
        }
        for state in states {
            let mut labels = self.labels();
            labels.push(("state", (*state).into()));
            let value = Value::Int(u64::from(*state == current));
            self.out.samples.push(desc, labels, value);
        }
    }

    fn source_available(&mut self, source: &'static str, available: bool) {
        let mut labels = self.labels();
        labels.push(("source", source.into()));
        let value = Value::Int(u64::from(available));
        self.out.samples.push(&SOURCE_AVAILABLE, labels, value);
    }

    /// A telemetry reading, unless an earlier source already gave it.
    fn reading(
        &mut self,
        desc: &'static Desc,
        kind: ReadingKind,
        source: &'static str,
        value: Value,
    ) {
        if !self.seen.insert((desc.name, kind.map_or("", |(_, k)| k))) {
            return;
        }
        let mut labels = self.labels();
        labels.extend(kind.map(|(label, k)| (label, LabelValue::from(k))));
        labels.push(("source", source.into()));
        self.out.samples.push(desc, labels, value);
    }

    /// Host sysfs of one card; returns its state.
    fn host(&mut self, dir: &SysDir, mpss_version: String) -> Option<String> {
        // Only MPSS 4 has `state_msg`; its post code moved under `device/spad/`.
        let mpss4 = self.optional_text(dir, "state_msg").is_some();
        let state = self.optional_text(dir, "state");
        if let Some(state) = &state {
            let states: &[&str] = if mpss4 { &MPSS4_STATES } else { &MPSS3_STATES };
            self.state_set(&CARD_STATE, states, state, &dir.path("state"));
        }
        let post_code = if mpss4 {
            "device/spad/post_code"
        } else {
            "post_code"
        };
        // MPSS 3 fails the read (EAGAIN, ENXIO) while no code is set: this item only.
        let code = dir.read(post_code, &mut self.reader).and_then(|text| {
            parse_post_code(text, mpss4)
                .ok_or_else(|| SysfsError::parse(&dir.path(post_code), "not a POST code", text))
        });
        if let Some(code) = self.out.optional(code) {
            let mut labels = self.labels();
            labels.push(("post_code", code.into()));
            self.out
                .samples
                .push(&CARD_POST_CODE, labels, Value::Int(1));
        }
        self.optional_count(dir, "boot_count", &CARD_BOOTS);
        self.optional_count(dir, "crash_count", &CARD_CRASHES);
        if let Some(scif) = self.optional_text(dir, "scif_status") {
            self.state_set(&SCIF_STATE, &SCIF_STATES, &scif, &dir.path("scif_status"));
        }
        let mut info = self.labels();
        for (label, file) in [
            ("family", "family"),
            ("stepping", "stepping"),
            ("sku", "sku"),
            ("serial_number", "serialnumber"),
            ("mode", "mode"),
        ] {
            let text = self.optional_text(dir, file).unwrap_or_default();
            info.push((label, text.into()));
        }
        info.push(("flash_version", self.flash_version(dir, mpss4).into()));
        info.push(("mpss_version", mpss_version.into()));
        self.out.samples.push(&CARD_INFO, info, Value::Int(1));
        state
    }

    /// The card's flash version, what `micinfo` prints as Flash Version; "" when absent or
    /// unset. MPSS 3 has the flash's build number in hex (`flashversion`, bits 31:16 of SBOX
    /// SCRATCH7: `187` is build 391, micinfo's `2.1.02.0391`), exported in decimal. MPSS 4's
    /// flash is the card's BIOS (`info/bios_version`, which miccheck compares with the release's),
    /// `<empty>` until the card has sent its DMI tables.
    fn flash_version(&mut self, dir: &SysDir, mpss4: bool) -> String {
        if mpss4 {
            let version = self.optional_text(dir, "info/bios_version");
            return version.filter(|v| v != "<empty>").unwrap_or_default();
        }
        let build = dir.read("flashversion", &mut self.reader).and_then(|text| {
            u16::from_str_radix(text, 16).map_err(|_| {
                SysfsError::parse(&dir.path("flashversion"), "not a hex build number", text)
            })
        });
        self.out
            .optional(build)
            .map(|build| build.to_string())
            .unwrap_or_default()
    }
}

/// MPSS 3 prints two ASCII characters; MPSS 4 prints `0x%02x`. Both become two upper-case
/// characters, so one card reads the same under either stack.
fn parse_post_code(text: &str, mpss4: bool) -> Option<String> {
    let code = if mpss4 {
        let hex = text.strip_prefix("0x")?;
        u8::from_str_radix(hex, 16)
            .ok()
            .map(|b| format!("{b:02X}"))?
    } else {
        text.to_ascii_uppercase()
    };
    (code.len() == 2 && code.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(code)
}

/// Temperatures are printed with `%u`: a reading below zero shows as a wrapped 32-bit value.
fn printed_unsigned(value: u32) -> i32 {
    value as i32
}

/// Micro-units (uW, uA, uV) to base units.
fn micro(value: u64) -> Value {
    Value::Float(value as f64 / 1e6)
}

fn degrees(celsius: i32) -> Value {
    Value::Float(f64::from(celsius))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Result<MicSettings, ConfigError> {
        MicSettings::from_flags(&Flags::parse((REGISTRATION.flags)(), args)?)
    }

    #[test]
    fn micras_paths_name_each_card_once() {
        let parsed = settings(&[
            "--collector.mic.micras-path=mic1=/srv/micras/mic1",
            "--collector.mic.micras-path",
            "mic0=/srv/micras/mic0",
        ])
        .unwrap();
        assert_eq!(
            parsed.micras_paths,
            [
                MicrasPath {
                    card: "mic0".into(),
                    dir: "/srv/micras/mic0".into()
                },
                MicrasPath {
                    card: "mic1".into(),
                    dir: "/srv/micras/mic1".into()
                },
            ]
        );
        for bad in [
            &[
                "--collector.mic.micras-path=mic0=/a",
                "--collector.mic.micras-path=mic0=/b",
            ][..],
            &["--collector.mic.micras-path=mic0"],
            &["--collector.mic.micras-path=card0=/var/lib/micras"],
            &["--collector.mic.micras-path=mic=/var/lib/micras"],
            &["--collector.mic.micras-path=mic0=relative/dir"],
        ] {
            let err = settings(bad).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid --collector.mic.micras-path "),
                "{err}"
            );
        }
        assert!(settings(&[]).unwrap().libmicmgmt);
        assert!(
            !settings(&["--no-collector.mic.libmicmgmt"])
                .unwrap()
                .libmicmgmt
        );
        assert!(
            settings(&[
                "--no-collector.mic.libmicmgmt",
                "--collector.mic.libmicmgmt"
            ])
            .unwrap()
            .libmicmgmt
        );
    }

    /// A file where a directory belongs (`ctrl`, MPSS 4's `device` holding `spad/post_code`)
    /// is absent, as a missing one is: the framework's one not-found rule, not an error.
    #[test]
    fn a_file_where_a_directory_belongs_is_absent() {
        let tmp = tempfile::tempdir().unwrap();
        let class_dir = tmp.path().join(CLASS_DIR);
        let card = class_dir.join("mic0");
        std::fs::create_dir_all(&card).unwrap();
        for (file, content) in [
            (class_dir.join("ctrl"), ""),
            (card.join("device"), ""),
            (card.join("state_msg"), "online"),
            (card.join("state"), "online"),
        ] {
            std::fs::write(file, content).unwrap();
        }
        let collector = MicCollector {
            sysfs: tmp.path().to_path_buf(),
            rootfs: tmp.path().to_path_buf(),
            micras_paths: Vec::new(),
            library: None,
        };
        let mic0 = Entry::Name("mic0".to_string());
        assert_eq!(collector.units().unwrap(), std::slice::from_ref(&mic0));
        let mut out = Output::default();
        collector.collect_unit(&mic0, &mut out);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let names: Vec<_> = out.samples.families().iter().map(|f| f.desc.name).collect();
        assert_eq!(names, [CARD_STATE.name, CARD_INFO.name]);
    }

    #[test]
    fn card_names() {
        assert_eq!(card_number("mic0"), Some(0));
        assert_eq!(card_number("mic12"), Some(12));
        for name in ["ctrl", "scif", "mic", "mic-1", "mic1a", "micras"] {
            assert_eq!(card_number(name), None, "{name}");
        }
    }

    #[test]
    fn post_codes_read_the_same_under_both_stacks() {
        assert_eq!(parse_post_code("3C", false).as_deref(), Some("3C"));
        assert_eq!(parse_post_code("ff", false).as_deref(), Some("FF"));
        assert_eq!(parse_post_code("0x3c", true).as_deref(), Some("3C"));
        assert_eq!(parse_post_code("0x7d", true).as_deref(), Some("7D"));
        for (bad, mpss4) in [
            ("", false),
            ("F", false),
            ("3C4", false),
            ("3c", true),
            ("0xzz", true),
            ("0x1ff", true),
        ] {
            assert_eq!(parse_post_code(bad, mpss4), None, "{bad:?}");
        }
    }

    #[test]
    fn wrapped_temperatures_are_negative() {
        assert_eq!(printed_unsigned(50u32), 50);
        assert_eq!(printed_unsigned(4_294_967_291u32), -5);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::prelude::*;

    const CARD_TOKENS: &[&str] = &[
        "mic", "0", "1", "9", "0x", "3c", "FF", "ras", " ", "\n", "-",
    ];

    proptest! {
        /// A post code becomes a label: two upper-case characters or nothing.
        #[test]
        fn any_post_code_is_two_characters_or_none(text in text(CARD_TOKENS), mpss4: bool) {
            if let Some(code) = parse_post_code(&text, mpss4) {
                prop_assert!(code.len() == 2 && code.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()), "{code:?}");
            }
            if let Some(number) = card_number(&text) {
                prop_assert_eq!(card_number(&format!("mic{number}")), Some(number));
            }
        }

        /// MPSS 3 prints the code as two characters, MPSS 4 as `0x%02x`: the same label.
        #[test]
        fn a_printed_post_code_reads_the_same_under_both_stacks(code: u8, number: u32) {
            let mpss3 = format!("{code:02x}");
            prop_assert_eq!(parse_post_code(&format!("0x{code:02x}"), true), Some(mpss3.to_uppercase()));
            prop_assert_eq!(parse_post_code(&mpss3, false), Some(mpss3.to_uppercase()));
            prop_assert_eq!(card_number(&format!("mic{number}")), Some(number));
        }
    }
}
