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

use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use libloading::Library;

use crate::collector::{
    CollectError, Collector, ErrorKind, Host, Output, Registration, Settings, StartError, Started,
};
use crate::config::{optional, toggle, ConfigError, Flags};
use crate::metrics::{Desc, LabelValue, Labels, Value};
use crate::sysfs::{AttributeReader, SysDir, SysfsError};

/// The unit name of the card the exporter runs on (`class/micras` present).
const LOCAL_CARD: &str = "local";
const LIBRARY: &str = "libmicmgmt.so.0";
const SOURCE_LIBRARY: &str = "libmicmgmt";
const SOURCE_MICRAS: &str = "micras";

pub const REGISTRATION: Registration = Registration {
    name: "mic",
    enabled_by_default: true,
    help: "Xeon Phi (MIC) card state, boot and crash counts from /sys/class/mic; temperatures, voltages and power from micras files and libmicmgmt",
    metrics: &METRICS,
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
            class_dir: host.sysfs.join("class/mic"),
            local_micras: host.sysfs.join("class/micras"),
            micras_paths: self
                .micras_paths
                .into_iter()
                .map(|path| {
                    let relative = path.dir.strip_prefix("/").unwrap_or(&path.dir);
                    (path.card, host.rootfs.join(relative))
                })
                .collect(),
            // Half the deadline: a card waiting for its turn still has time to send what it read.
            library: self
                .libmicmgmt
                .then(|| LibrarySource::new(host.scrape_timeout / 2)),
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
    class_dir: PathBuf,
    local_micras: PathBuf,
    micras_paths: Vec<(String, PathBuf)>,
    library: Option<LibrarySource>,
}

const CARD_INFO: Desc = Desc::gauge(
    "hpcnode_mic_card_info",
    "Xeon Phi card identity: family, stepping, SKU, serial number, boot mode and the host's MPSS version.",
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

/// micras `temp` lines, in the driver's order.
const TEMPERATURE_SENSORS: [&str; 8] = [
    "die",
    "board",
    "fan_inlet",
    "fan_outlet",
    "gddr",
    "vccp",
    "vddg",
    "vddq",
];
/// The first seven micras `power` lines, in the driver's order (microwatts).
const POWER_READINGS: [&str; 7] = [
    "total_window0",
    "total_window1",
    "instantaneous",
    "instantaneous_max",
    "pcie",
    "connector_2x3",
    "connector_2x4",
];
/// The last three micras `power` lines (`uW uA uV` each).
const RAILS: [&str; 3] = ["vccp", "vddg", "vddq"];
/// micras `plim` fields (watts).
const POWER_LIMITS: [&str; 3] = ["physical", "high", "low"];
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
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        let mut cards: Vec<String> = match SysDir::open(&self.class_dir).and_then(|d| d.entries()) {
            // `ctrl` and `scif` sit beside the cards.
            Ok(names) => names
                .into_iter()
                .filter(|name| card_number(name).is_some())
                .collect(),
            // No MPSS host driver: no cards, and nothing failed.
            Err(err) if err.is_not_found() => Vec::new(),
            Err(err) => return Err(err.into()),
        };
        for (card, _) in &self.micras_paths {
            if !cards.contains(card) {
                cards.push(card.clone());
            }
        }
        cards.sort_by_key(|card| card_number(card));
        match SysDir::open(&self.local_micras) {
            Ok(_) => cards.push(LOCAL_CARD.to_string()),
            Err(err) if err.is_not_found() => {}
            Err(err) => return Err(err.into()),
        }
        Ok(cards)
    }

    fn collect_unit(&self, card: &String, out: &mut Output) {
        let mut read = CardRead {
            reader: AttributeReader::default(),
            out,
            device: card.to_string().into(),
            seen: HashSet::new(),
        };
        // A card the host driver lists: its number, and its state when it could be read.
        let mut host_card = None;
        if let Some(number) = card_number(card) {
            match SysDir::open(&self.class_dir.join(card)) {
                Ok(dir) => {
                    let version = self.mpss_version(&mut read);
                    host_card = Some((number, read.host(&dir, version)));
                }
                // A card known only from its micras copy.
                Err(err) if err.is_not_found() => {}
                Err(err) => read.error(err),
            }
        }
        if let (Some(library), Some((number, state))) = (&self.library, &host_card) {
            let online = state.as_deref() == Some("online");
            let available = read.library(library, *number, online);
            read.source_available(SOURCE_LIBRARY, available);
        }
        let micras = if card == LOCAL_CARD {
            Some(self.local_micras.as_path())
        } else {
            self.micras_paths
                .iter()
                .find(|(name, _)| name == card)
                .map(|(_, dir)| dir.as_path())
        };
        if let Some(path) = micras {
            let available = match SysDir::open(path) {
                Ok(dir) => {
                    read.micras(&dir);
                    true
                }
                Err(err) => {
                    read.error(err);
                    false
                }
            };
            read.source_available(SOURCE_MICRAS, available);
        }
    }
}

impl MicCollector {
    /// `class/mic/ctrl/version`: the host's MPSS version, "" when absent.
    fn mpss_version(&self, read: &mut CardRead) -> String {
        match SysDir::open(&self.class_dir.join("ctrl")) {
            Ok(ctrl) => read.optional_text(&ctrl, "version").unwrap_or_default(),
            Err(err) => {
                if !err.is_not_found() {
                    read.error(err);
                }
                String::new()
            }
        }
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

    /// An optional attribute: missing is `None`, other failures are reported and give `None`.
    fn optional_text(&mut self, dir: &SysDir, name: &str) -> Option<String> {
        match dir.read(name, &mut self.reader) {
            Ok(text) => Some(text.to_string()),
            Err(err) => {
                if !err.is_not_found() {
                    self.error(err);
                }
                None
            }
        }
    }

    fn optional_count(&mut self, dir: &SysDir, name: &str, desc: &Desc) {
        match dir.read_u64(name, &mut self.reader) {
            Ok(count) => self
                .out
                .samples
                .push(desc, self.labels(), Value::Int(count)),
            Err(err) if err.is_not_found() => {}
            Err(err) => self.error(err),
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
        match dir.read(post_code, &mut self.reader) {
            Ok(text) => match parse_post_code(text, mpss4) {
                Some(code) => {
                    let mut labels = self.labels();
                    labels.push(("post_code", code.into()));
                    self.out
                        .samples
                        .push(&CARD_POST_CODE, labels, Value::Int(1));
                }
                None => {
                    let err = SysfsError::parse(&dir.path(post_code), "not a POST code", text);
                    self.error(err);
                }
            },
            Err(err) if err.is_not_found() => {}
            // MPSS 3 fails the read (EAGAIN, ENXIO) while no code is set: this item only.
            Err(err) => self.error(err),
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
        info.push(("mpss_version", mpss_version.into()));
        self.out.samples.push(&CARD_INFO, info, Value::Int(1));
        state
    }

    /// The micras files of one card; each is optional, each line is checked on its own.
    fn micras(&mut self, dir: &SysDir) {
        if let Some(text) = self.optional_text(dir, "temp") {
            let lines = self.lines(dir, "temp", &text, TEMPERATURE_SENSORS.len());
            for (sensor, line) in TEMPERATURE_SENSORS.into_iter().zip(lines) {
                let Some([current, status]) = self.fields(dir, "temp", line) else {
                    continue;
                };
                if status > UNAVAILABLE {
                    self.error(SysfsError::parse(&dir.path("temp"), "status not 0-3", line));
                    continue;
                }
                let kind = Some(("sensor", sensor));
                self.reading(&TEMPERATURE_STATUS, kind, SOURCE_MICRAS, Value::Int(status));
                if status == UNAVAILABLE {
                    continue;
                }
                // The driver prints 32 bits: a wider number is not its (and would wrap).
                match u32::try_from(current) {
                    Ok(printed) => {
                        let celsius = degrees(printed_unsigned(printed));
                        self.reading(&TEMPERATURE, kind, SOURCE_MICRAS, celsius);
                    }
                    Err(_) => {
                        let reason = "temperature wider than 32 bits";
                        self.error(SysfsError::parse(&dir.path("temp"), reason, line));
                    }
                }
            }
        }
        if let Some(text) = self.optional_text(dir, "power") {
            let expected = POWER_READINGS.len() + RAILS.len();
            let lines = self.lines(dir, "power", &text, expected);
            for (reading, line) in POWER_READINGS.into_iter().zip(&lines) {
                if let Some([microwatts]) = self.fields(dir, "power", line) {
                    let kind = Some(("reading", reading));
                    self.reading(&POWER, kind, SOURCE_MICRAS, micro(microwatts));
                }
            }
            for (rail, line) in RAILS
                .into_iter()
                .zip(lines.iter().skip(POWER_READINGS.len()))
            {
                if let Some(values) = self.fields(dir, "power", line) {
                    self.micras_rail(rail, values);
                }
            }
        }
        for (file, desc, scale) in [
            ("volt", &CORE_VOLTAGE, 1e-6),
            ("freq", &CORE_FREQUENCY, 1e3),
            ("gvolt", &MEMORY_VOLTAGE, 1e-6),
            ("gfreq", &MEMORY_FREQUENCY, 1e3),
        ] {
            // The current value comes first, then set or default values and supported ones.
            if let Some([current]) = self.first_line_fields(dir, file) {
                self.reading(
                    desc,
                    None,
                    SOURCE_MICRAS,
                    Value::Float(current as f64 * scale),
                );
            }
        }
        if let Some(watts) = self.first_line_fields::<3>(dir, "plim") {
            for (limit, value) in POWER_LIMITS.into_iter().zip(watts) {
                let kind = Some(("limit", limit));
                self.reading(&POWER_LIMIT, kind, SOURCE_MICRAS, Value::Int(value));
            }
        }
        if let Some([_override, _pwm, rpm]) = self.first_line_fields(dir, "fan") {
            self.reading(&FAN_SPEED, None, SOURCE_MICRAS, Value::Int(rpm));
        }
    }

    /// A micras rail line's `[uW, uA, uV]` in base units.
    fn micras_rail(&mut self, rail: &'static str, values: [u64; 3]) {
        let kind = Some(("rail", rail));
        let [microwatts, microamperes, microvolts] = values;
        self.reading(&RAIL_POWER, kind, SOURCE_MICRAS, micro(microwatts));
        self.reading(&RAIL_CURRENT, kind, SOURCE_MICRAS, micro(microamperes));
        self.reading(&RAIL_VOLTAGE, kind, SOURCE_MICRAS, micro(microvolts));
    }

    /// The non-empty lines of a micras file; fewer than the driver prints is reported (the
    /// lines present are still used).
    fn lines<'t>(
        &mut self,
        dir: &SysDir,
        file: &str,
        text: &'t str,
        expected: usize,
    ) -> Vec<&'t str> {
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.len() < expected {
            let reason = "fewer lines than the driver prints";
            self.error(SysfsError::parse(&dir.path(file), reason, text));
        }
        lines
    }

    /// The first `N` unsigned numbers of a line; anything else is reported.
    fn fields<const N: usize>(&mut self, dir: &SysDir, file: &str, line: &str) -> Option<[u64; N]> {
        let parsed = parse_fields(line);
        if parsed.is_none() {
            let reason = "expected unsigned numbers";
            self.error(SysfsError::parse(&dir.path(file), reason, line));
        }
        parsed
    }

    fn first_line_fields<const N: usize>(&mut self, dir: &SysDir, file: &str) -> Option<[u64; N]> {
        let text = self.optional_text(dir, file)?;
        let line = text.lines().next().unwrap_or_default();
        self.fields(dir, file, line)
    }

    /// Telemetry over SCIF for a host card; returns whether the card gave any reading.
    fn library(&mut self, source: &LibrarySource, number: u32, online: bool) -> bool {
        let library = match source.load() {
            Ok(library) => library,
            Err(err) => {
                // Said once (one error, one log line); the 0 in the metric says it every scrape.
                if !source.reported.swap(true, Ordering::Relaxed) {
                    self.error(err);
                }
                return false;
            }
        };
        // A card that is not up cannot answer over SCIF; its state says why.
        if !online {
            return false;
        }
        let Some(_turn) = source.calls.take() else {
            self.error(LibraryError::Busy);
            return false;
        };
        match library.open(number) {
            Ok(device) => {
                let answered = self.library_readings(library, &device);
                let code = device.close();
                if code != 0 {
                    self.error(LibraryError::Call {
                        call: "mic_close_device",
                        card: self.device.as_str().to_string(),
                        code,
                    });
                }
                answered
            }
            Err(err) => {
                self.error(err);
                false
            }
        }
    }

    /// Every reading the library gives for an open card; returns whether there was any.
    fn library_readings(&mut self, library: &MicLib, device: &OpenDevice) -> bool {
        let mut calls = Calls {
            card: self.device.as_str(),
            failures: Vec::new(),
        };
        let mut readings: Vec<(&'static Desc, ReadingKind, Value)> = Vec::new();
        // SAFETY: every handle passed is one the library returned and has not freed, and every
        // reader has the prototype miclib.h declares for its name.
        unsafe {
            let get_thermal = ("mic_get_thermal_info", library.get_thermal_info);
            if let Some(thermal) = calls.info(get_thermal, device.handle) {
                for sensor in &library.temperatures {
                    let Some(valid) = calls.read((sensor.valid_call, sensor.valid), thermal) else {
                        continue;
                    };
                    let kind = Some(("sensor", sensor.sensor));
                    let status = if valid != 0 { 0 } else { UNAVAILABLE };
                    readings.push((&TEMPERATURE_STATUS, kind, Value::Int(status)));
                    if valid == 0 {
                        continue;
                    }
                    let celsius = match sensor.read {
                        Temperature::Wide(read) => calls.read((sensor.read_call, read), thermal),
                        Temperature::Narrow(read) => {
                            calls.read((sensor.read_call, read), thermal).map(u32::from)
                        }
                    };
                    if let Some(celsius) = celsius {
                        readings.push((&TEMPERATURE, kind, degrees(printed_unsigned(celsius))));
                    }
                }
                calls.free(
                    ("mic_free_thermal_info", library.free_thermal_info),
                    thermal,
                );
            }

            let get_power = ("mic_get_power_utilization_info", library.get_power_info);
            if let Some(power) = calls.info(get_power, device.handle) {
                for (reading, call, read) in &library.power {
                    if let Some(microwatts) = calls.read((call, *read), power) {
                        let kind = Some(("reading", *reading));
                        readings.push((&POWER, kind, micro(u64::from(microwatts))));
                    }
                }
                let rail_metrics = [&RAIL_POWER, &RAIL_CURRENT, &RAIL_VOLTAGE];
                for (rail, readers) in &library.rails {
                    for (reader, desc) in readers.iter().zip(rail_metrics) {
                        if let Some(micros) = calls.read(*reader, power) {
                            readings.push((desc, Some(("rail", *rail)), micro(u64::from(micros))));
                        }
                    }
                }
                calls.free(
                    ("mic_free_power_utilization_info", library.free_power_info),
                    power,
                );
            }

            let get_cores = ("mic_get_cores_info", library.get_cores_info);
            if let Some(cores) = calls.info(get_cores, device.handle) {
                let voltage = ("mic_get_cores_voltage", library.cores_voltage);
                if let Some(microvolts) = calls.read(voltage, cores) {
                    readings.push((&CORE_VOLTAGE, None, micro(u64::from(microvolts))));
                }
                let frequency = ("mic_get_cores_frequency", library.cores_frequency);
                if let Some(kilohertz) = calls.read(frequency, cores) {
                    let hertz = Value::Float(f64::from(kilohertz) * 1e3);
                    readings.push((&CORE_FREQUENCY, None, hertz));
                }
                calls.free(("mic_free_cores_info", library.free_cores_info), cores);
            }

            let get_memory = ("mic_get_memory_info", library.get_memory_info);
            if let Some(memory) = calls.info(get_memory, device.handle) {
                let voltage = ("mic_get_memory_voltage", library.memory_voltage);
                if let Some(microvolts) = calls.read(voltage, memory) {
                    readings.push((&MEMORY_VOLTAGE, None, micro(u64::from(microvolts))));
                }
                calls.free(("mic_free_memory_info", library.free_memory_info), memory);
            }
        }
        let failures = calls.failures;
        let answered = !readings.is_empty();
        for (desc, kind, value) in readings {
            self.reading(desc, kind, SOURCE_LIBRARY, value);
        }
        for failure in failures {
            self.error(failure);
        }
        answered
    }
}

/// libmicmgmt calls for one card: each returns 0 on success; failures are kept to report.
struct Calls<'c> {
    card: &'c str,
    failures: Vec<LibraryError>,
}

impl Calls<'_> {
    fn failed(&mut self, call: &'static str, code: c_int) {
        self.failures.push(LibraryError::Call {
            call,
            card: self.card.to_string(),
            code,
        });
    }

    /// An info structure of an open device (thermal, power, cores, memory), to be freed.
    ///
    /// # Safety
    /// `device` is an open device handle; `get` has the `mic_get_*_info` prototype.
    unsafe fn info(
        &mut self,
        (call, get): (&'static str, GetInfo),
        device: Handle,
    ) -> Option<Handle> {
        let mut info = ptr::null_mut();
        match get(device, &mut info) {
            0 if !info.is_null() => Some(info),
            code => {
                self.failed(call, code);
                None
            }
        }
    }

    /// Frees an info structure; a library that refuses is reported.
    ///
    /// # Safety
    /// `info` is a live info structure of the kind `free` takes, not used again.
    unsafe fn free(&mut self, (call, free): (&'static str, Free), info: Handle) {
        match free(info) {
            0 => {}
            code => self.failed(call, code),
        }
    }

    /// One value read from an info structure.
    ///
    /// # Safety
    /// `info` is a live info structure of the kind `read` takes.
    unsafe fn read<T: Default>(
        &mut self,
        (call, read): (&'static str, unsafe extern "C" fn(Handle, *mut T) -> c_int),
        info: Handle,
    ) -> Option<T> {
        let mut value = T::default();
        match read(info, &mut value) {
            0 => Some(value),
            code => {
                self.failed(call, code);
                None
            }
        }
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

fn parse_fields<const N: usize>(line: &str) -> Option<[u64; N]> {
    let mut values = [0u64; N];
    let mut words = line.split_whitespace();
    for value in &mut values {
        *value = words.next()?.parse().ok()?;
    }
    Some(values)
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

/// Why libmicmgmt gave nothing (or not everything) for a card.
#[derive(Debug, thiserror::Error)]
enum LibraryError {
    #[error("{LIBRARY} not used: reading cards over SCIF needs root")]
    NotRoot,
    #[error("cannot load {LIBRARY}: {0}")]
    Load(String),
    #[error("{LIBRARY} lacks the symbol {0}")]
    MissingSymbol(&'static str),
    #[error("{LIBRARY} does not list {0} among its devices")]
    NotListed(String),
    #[error("{LIBRARY} busy: a call for another card has not returned")]
    Busy,
    #[error("{LIBRARY} {call} for {card} failed with error {code}")]
    Call {
        call: &'static str,
        card: String,
        code: c_int,
    },
}

impl From<&LibraryError> for CollectError {
    fn from(err: &LibraryError) -> Self {
        let kind = match err {
            LibraryError::Busy => ErrorKind::StillRunning,
            _ => ErrorKind::Io,
        };
        CollectError::new(kind, err.to_string())
    }
}

impl From<LibraryError> for CollectError {
    fn from(err: LibraryError) -> Self {
        CollectError::from(&err)
    }
}

/// The library, loaded on first use by a card read and kept for the process's life.
struct LibrarySource {
    loaded: OnceLock<Result<MicLib, LibraryError>>,
    /// Whether the load failure has been reported.
    reported: AtomicBool,
    /// libmicmgmt keeps its error state in globals: one caller at a time.
    calls: Turn,
}

/// One caller at a time, and a bounded wait for the turn: a call that never returns (a card
/// that stopped answering over SCIF) holds its own card's read, not every other card's too.
struct Turn {
    taken: Mutex<bool>,
    freed: Condvar,
    wait: Duration,
}

/// The turn, given back on drop (a panic included).
struct TurnGuard<'t>(&'t Turn);

impl Turn {
    /// The turn, or `None` when it was not given back within the wait.
    fn take(&self) -> Option<TurnGuard<'_>> {
        // The flag is only ever set and cleared under the lock: a poisoned lock still holds it.
        let taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut taken, _) = self
            .freed
            .wait_timeout_while(taken, self.wait, |taken| *taken)
            .unwrap_or_else(PoisonError::into_inner);
        if *taken {
            return None;
        }
        *taken = true;
        Some(TurnGuard(self))
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        *self.0.taken.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.freed.notify_one();
    }
}

impl LibrarySource {
    fn new(wait: Duration) -> Self {
        LibrarySource {
            loaded: OnceLock::new(),
            reported: AtomicBool::new(false),
            calls: Turn {
                taken: Mutex::new(false),
                freed: Condvar::new(),
                wait,
            },
        }
    }

    fn load(&self) -> Result<&MicLib, &LibraryError> {
        self.loaded
            .get_or_init(|| {
                // SAFETY: geteuid has no preconditions.
                if unsafe { libc::geteuid() } != 0 {
                    return Err(LibraryError::NotRoot);
                }
                MicLib::load()
            })
            .as_ref()
    }
}

type Handle = *mut c_void;
type GetList = unsafe extern "C" fn(*mut Handle) -> c_int;
type Free = unsafe extern "C" fn(Handle) -> c_int;
type GetCount = unsafe extern "C" fn(Handle, *mut c_int) -> c_int;
type GetAtIndex = unsafe extern "C" fn(Handle, c_int, *mut c_int) -> c_int;
type Open = unsafe extern "C" fn(*mut Handle, u32) -> c_int;
type GetInfo = unsafe extern "C" fn(Handle, *mut Handle) -> c_int;
type GetU32 = unsafe extern "C" fn(Handle, *mut u32) -> c_int;
type GetU16 = unsafe extern "C" fn(Handle, *mut u16) -> c_int;

/// The die temperature is read as 32 bits, the others as 16 (miclib.h).
enum Temperature {
    Wide(GetU32),
    Narrow(GetU16),
}

struct TemperatureSensor {
    sensor: &'static str,
    read_call: &'static str,
    read: Temperature,
    valid_call: &'static str,
    valid: GetCount,
}

/// The libmicmgmt functions the collector calls, resolved once at load.
struct MicLib {
    get_devices: GetList,
    free_devices: Free,
    get_ndevices: GetCount,
    get_device_at_index: GetAtIndex,
    open_device: Open,
    close_device: Free,
    get_thermal_info: GetInfo,
    free_thermal_info: Free,
    temperatures: Vec<TemperatureSensor>,
    get_power_info: GetInfo,
    free_power_info: Free,
    /// Reading name, function name, reader.
    power: Vec<(&'static str, &'static str, GetU32)>,
    /// Per rail: power, current and voltage as (function name, reader).
    rails: Vec<(&'static str, [(&'static str, GetU32); 3])>,
    get_cores_info: GetInfo,
    free_cores_info: Free,
    cores_voltage: GetU32,
    cores_frequency: GetU32,
    get_memory_info: GetInfo,
    free_memory_info: Free,
    memory_voltage: GetU32,
    /// Keeps the function pointers above valid.
    _library: Library,
}

/// Temperature sensors libmicmgmt reads (it has no board sensor): micras name, reader, validity.
const LIBRARY_TEMPERATURES: [(&str, &str, &str); 7] = [
    ("die", "mic_get_die_temp", "mic_is_die_temp_valid"),
    ("gddr", "mic_get_gddr_temp", "mic_is_gddr_temp_valid"),
    ("fan_inlet", "mic_get_fanin_temp", "mic_is_fanin_temp_valid"),
    (
        "fan_outlet",
        "mic_get_fanout_temp",
        "mic_is_fanout_temp_valid",
    ),
    ("vccp", "mic_get_vccp_temp", "mic_is_vccp_temp_valid"),
    ("vddg", "mic_get_vddg_temp", "mic_is_vddg_temp_valid"),
    ("vddq", "mic_get_vddq_temp", "mic_is_vddq_temp_valid"),
];
const LIBRARY_POWER: [(&str, &str); 6] = [
    ("total_window0", "mic_get_total_power_readings_w0"),
    ("total_window1", "mic_get_total_power_readings_w1"),
    ("instantaneous", "mic_get_inst_power_readings"),
    ("pcie", "mic_get_pcie_power_readings"),
    ("connector_2x3", "mic_get_c2x3_power_readings"),
    ("connector_2x4", "mic_get_c2x4_power_readings"),
];
/// Per rail: power (uW), current (uA), voltage (uV) readers.
const LIBRARY_RAILS: [(&str, [&str; 3]); 3] = [
    (
        "vccp",
        [
            "mic_get_vccp_power_readings",
            "mic_get_vccp_current_readings",
            "mic_get_vccp_voltage_readings",
        ],
    ),
    (
        "vddg",
        [
            "mic_get_vddg_power_readings",
            "mic_get_vddg_current_readings",
            "mic_get_vddg_voltage_readings",
        ],
    ),
    (
        "vddq",
        [
            "mic_get_vddq_power_readings",
            "mic_get_vddq_current_readings",
            "mic_get_vddq_voltage_readings",
        ],
    ),
];

fn symbol<T: Copy>(library: &Library, name: &'static str) -> Result<T, LibraryError> {
    // SAFETY: T is the function type miclib.h declares for `name`.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|symbol| *symbol)
        .map_err(|_| LibraryError::MissingSymbol(name))
}

impl MicLib {
    fn load() -> Result<MicLib, LibraryError> {
        // SAFETY: loading runs the library's initialisers; libmicmgmt's only set up its state.
        let library =
            unsafe { Library::new(LIBRARY) }.map_err(|err| LibraryError::Load(err.to_string()))?;
        let lib = &library;
        let temperatures = LIBRARY_TEMPERATURES
            .into_iter()
            .map(|(sensor, read_call, valid_call)| {
                let read = if sensor == "die" {
                    Temperature::Wide(symbol(lib, read_call)?)
                } else {
                    Temperature::Narrow(symbol(lib, read_call)?)
                };
                Ok(TemperatureSensor {
                    sensor,
                    read_call,
                    read,
                    valid_call,
                    valid: symbol(lib, valid_call)?,
                })
            })
            .collect::<Result<_, LibraryError>>()?;
        let power = LIBRARY_POWER
            .into_iter()
            .map(|(reading, call)| Ok((reading, call, symbol(lib, call)?)))
            .collect::<Result<_, LibraryError>>()?;
        let rails = LIBRARY_RAILS
            .into_iter()
            .map(|(rail, [power, current, voltage])| {
                let reader = |call| Ok::<_, LibraryError>((call, symbol(lib, call)?));
                Ok((rail, [reader(power)?, reader(current)?, reader(voltage)?]))
            })
            .collect::<Result<_, LibraryError>>()?;
        Ok(MicLib {
            get_devices: symbol(lib, "mic_get_devices")?,
            free_devices: symbol(lib, "mic_free_devices")?,
            get_ndevices: symbol(lib, "mic_get_ndevices")?,
            get_device_at_index: symbol(lib, "mic_get_device_at_index")?,
            open_device: symbol(lib, "mic_open_device")?,
            close_device: symbol(lib, "mic_close_device")?,
            get_thermal_info: symbol(lib, "mic_get_thermal_info")?,
            free_thermal_info: symbol(lib, "mic_free_thermal_info")?,
            temperatures,
            get_power_info: symbol(lib, "mic_get_power_utilization_info")?,
            free_power_info: symbol(lib, "mic_free_power_utilization_info")?,
            power,
            rails,
            get_cores_info: symbol(lib, "mic_get_cores_info")?,
            free_cores_info: symbol(lib, "mic_free_cores_info")?,
            cores_voltage: symbol(lib, "mic_get_cores_voltage")?,
            cores_frequency: symbol(lib, "mic_get_cores_frequency")?,
            get_memory_info: symbol(lib, "mic_get_memory_info")?,
            free_memory_info: symbol(lib, "mic_free_memory_info")?,
            memory_voltage: symbol(lib, "mic_get_memory_voltage")?,
            _library: library,
        })
    }

    /// Opens card `number`, which the library must list.
    fn open(&self, number: u32) -> Result<OpenDevice<'_>, LibraryError> {
        let card = format!("mic{number}");
        let failed = |call, code| LibraryError::Call {
            call,
            card: card.clone(),
            code,
        };
        // SAFETY: pointers to locals of the prototypes' types; the list is freed once.
        unsafe {
            let mut list = ptr::null_mut();
            let code = (self.get_devices)(&mut list);
            if code != 0 || list.is_null() {
                return Err(failed("mic_get_devices", code));
            }
            let listed = (|| {
                let mut count: c_int = 0;
                let code = (self.get_ndevices)(list, &mut count);
                if code != 0 {
                    return Err(failed("mic_get_ndevices", code));
                }
                for index in 0..count {
                    let mut device: c_int = -1;
                    let code = (self.get_device_at_index)(list, index, &mut device);
                    if code != 0 {
                        return Err(failed("mic_get_device_at_index", code));
                    }
                    if u32::try_from(device) == Ok(number) {
                        return Ok(true);
                    }
                }
                Ok(false)
            })();
            let freed = (self.free_devices)(list);
            if !listed? {
                return Err(LibraryError::NotListed(card));
            }
            if freed != 0 {
                return Err(failed("mic_free_devices", freed));
            }
            let mut handle = ptr::null_mut();
            let code = (self.open_device)(&mut handle, number);
            if code != 0 || handle.is_null() {
                return Err(failed("mic_open_device", code));
            }
            Ok(OpenDevice {
                handle,
                close: self.close_device,
                _library: std::marker::PhantomData,
            })
        }
    }
}

/// An open card handle, closed on drop (or by [`OpenDevice::close`], which tells how it went).
struct OpenDevice<'l> {
    handle: Handle,
    close: Free,
    _library: std::marker::PhantomData<&'l MicLib>,
}

impl OpenDevice<'_> {
    /// Closes the card; the library's return code.
    fn close(self) -> c_int {
        let device = std::mem::ManuallyDrop::new(self);
        // SAFETY: the handle came from mic_open_device; `device` is never dropped, so this is
        // its one close.
        unsafe { (device.close)(device.handle) }
    }
}

impl Drop for OpenDevice<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from mic_open_device and is closed once.
        unsafe { (self.close)(self.handle) };
    }
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
    fn fields_take_the_leading_numbers() {
        assert_eq!(parse_fields::<2>("50 0"), Some([50, 0]));
        assert_eq!(
            parse_fields::<1>("1041000 1041000 1000000 1100000"),
            Some([1041000])
        );
        assert_eq!(parse_fields::<3>("0 0 1033000"), Some([0, 0, 1033000]));
        assert_eq!(parse_fields::<2>("50"), None);
        assert_eq!(parse_fields::<1>("banana"), None);
        assert_eq!(parse_fields::<1>("-5"), None);
    }

    #[test]
    fn a_turn_not_given_back_is_waited_for_a_bounded_time() {
        let source = LibrarySource::new(Duration::from_millis(50));
        let turn = source.calls.take().unwrap();
        let started = std::time::Instant::now();
        assert!(source.calls.take().is_none());
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(turn);
        assert!(source.calls.take().is_some());
        // A waiting caller is given the turn as soon as it is given back.
        let source = LibrarySource::new(Duration::from_secs(60));
        let turn = source.calls.take().unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| source.calls.take().is_some());
            std::thread::sleep(Duration::from_millis(10));
            drop(turn);
            assert!(waiter.join().unwrap());
        });
    }

    #[test]
    fn wrapped_temperatures_are_negative() {
        assert_eq!(printed_unsigned(50u32), 50);
        assert_eq!(printed_unsigned(4_294_967_291u32), -5);
    }
}
