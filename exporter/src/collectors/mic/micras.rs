//! micras files: the card driver's text files of readings (`temp`, `power`, `volt`, `freq`,
//! `gvolt`, `gfreq`, `plim`, `fan`), read on the card itself or from a copy per card.

use super::{
    degrees, micro, printed_unsigned, CardRead, CORE_FREQUENCY, CORE_VOLTAGE, FAN_SPEED,
    MEMORY_FREQUENCY, MEMORY_VOLTAGE, POWER, POWER_LIMIT, RAIL_CURRENT, RAIL_POWER, RAIL_VOLTAGE,
    SOURCE_MICRAS, TEMPERATURE, TEMPERATURE_STATUS, UNAVAILABLE,
};
use crate::metrics::Value;
use crate::sysfs::{SysDir, SysfsError};

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

impl CardRead<'_> {
    /// The micras files of one card; each is optional, each line is checked on its own.
    pub(super) fn micras(&mut self, dir: &SysDir) {
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
}

/// The micras files in `dir` read as for one card, with nothing else of the card: for the
/// fuzz target and the property tests.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn read_card_files(dir: &SysDir) -> crate::collector::Output {
    let mut out = crate::collector::Output::default();
    let mut read = CardRead {
        reader: crate::sysfs::AttributeReader::default(),
        out: &mut out,
        device: "mic0".into(),
        seen: std::collections::HashSet::new(),
    };
    read.micras(dir);
    out
}

fn parse_fields<const N: usize>(line: &str) -> Option<[u64; N]> {
    let mut values = [0u64; N];
    let mut words = line.split_whitespace();
    for value in &mut values {
        *value = words.next()?.parse().ok()?;
    }
    Some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::collector::Output;
    use crate::metrics::Desc;
    use crate::test_strategies::text;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const MICRAS_FILES: [&str; 8] = [
        "temp", "power", "volt", "freq", "gvolt", "gfreq", "plim", "fan",
    ];
    const MICRAS_TOKENS: &[&str] = &[
        "0",
        "1",
        "3",
        "4",
        "50",
        "4294967291",
        "18446744073709551615",
        "18446744073709551616",
        " ",
        "\n",
        "-",
        "N/A",
    ];

    /// The value of `desc`'s sample whose labels include `label`.
    fn value(out: &Output, desc: &Desc, label: (&str, &str)) -> Option<Value> {
        let family = out
            .samples
            .families()
            .into_iter()
            .find(|f| f.desc.name == desc.name)?;
        let (name, value) = label;
        let label = format!("{name}=\"{value}\"");
        let sample = family
            .samples()
            .find(|(labels, _)| labels.to_string().split(',').any(|l| l == label));
        sample.map(|(_, value)| value)
    }

    proptest! {
        #[test]
        fn any_line_is_fields_or_none(line in text(MICRAS_TOKENS)) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let first = |n: usize| words.iter().take(n).map(|w| w.parse::<u64>().ok()).collect::<Option<Vec<_>>>();
            prop_assert_eq!(parse_fields::<1>(&line).map(Vec::from), first(1).filter(|v| v.len() == 1));
            prop_assert_eq!(parse_fields::<3>(&line).map(Vec::from), first(3).filter(|v| v.len() == 3));
        }

        #[test]
        fn printed_numbers_read_back(values: [u64; 3], rest in "( [0-9]{1,8}){0,4}", space in "[ \t]{1,3}") {
            let line = format!("{}{space}{}{space}{}{rest}", values[0], values[1], values[2]);
            prop_assert_eq!(parse_fields::<3>(&line), Some(values));
            prop_assert_eq!(parse_fields::<1>(&line), Some([values[0]]));
        }
    }

    #[test]
    fn any_micras_files_are_readings_or_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SysDir::open(tmp.path(), "").unwrap();
        let config = ProptestConfig::with_cases(64);
        proptest!(config, |(files in vec(prop::option::of(text(MICRAS_TOKENS)), MICRAS_FILES.len()))| {
            for (name, content) in MICRAS_FILES.iter().zip(&files) {
                let path = tmp.path().join(name);
                match content {
                    Some(content) => std::fs::write(path, content).unwrap(),
                    None => drop(std::fs::remove_file(path)),
                }
            }
            let out = read_card_files(&dir);
            for family in out.samples.families() {
                for (_, value) in family.samples() {
                    prop_assert!(!matches!(value, Value::Float(f) if !f.is_finite()), "{}", family.desc.name);
                }
            }
        });
    }

    /// A `temp` file as the card's driver prints it: `%u %u` (reading, status) per sensor.
    #[test]
    fn a_printed_temp_file_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SysDir::open(tmp.path(), "").unwrap();
        let config = ProptestConfig::with_cases(64);
        proptest!(config, |(sensors in vec((any::<u32>(), 0u64..=UNAVAILABLE), TEMPERATURE_SENSORS.len()))| {
            let printed: String = sensors.iter().map(|(celsius, status)| format!("{celsius} {status}\n")).collect();
            std::fs::write(tmp.path().join("temp"), printed).unwrap();
            let out = read_card_files(&dir);
            prop_assert!(out.errors.is_empty());
            for (sensor, (celsius, status)) in TEMPERATURE_SENSORS.into_iter().zip(sensors) {
                let label = ("sensor", sensor);
                prop_assert_eq!(value(&out, &TEMPERATURE_STATUS, label), Some(Value::Int(status)));
                let expected = (status != UNAVAILABLE).then(|| degrees(printed_unsigned(celsius)));
                prop_assert_eq!(value(&out, &TEMPERATURE, label), expected);
            }
        });
    }
}
