//! RDMA port attributes as sysfs prints them (`class/infiniband/<device>/ports/<port>/`),
//! parsed in one place for every collector that reads them: `rdma` exports them, `verbs`
//! judges its probe's bandwidth against the port's data rate.

use std::path::PathBuf;

use crate::sysfs::SysfsError;

/// The `link_layer` of a RoCE port, whose `rate` is a payload rate already.
pub const ETHERNET_LINK_LAYER: &str = "Ethernet";

/// `4: ACTIVE` -> 4 (the `state` and `phys_state` files); `path` names the file in errors,
/// made only for one (every port's files are parsed every scrape).
pub fn parse_state_id(path: impl Fn() -> PathBuf, text: &str) -> Result<u64, SysfsError> {
    text.split_once(':')
        .and_then(|(id, _)| id.trim().parse().ok())
        .ok_or_else(|| SysfsError::parse(&path(), "expected '<id>: <NAME>'", text))
}

/// A parsed `rate` file: `100 Gb/sec (4X EDR)`, `10 Gb/sec (4X)`, `0 GB/sec`.
#[derive(Debug, PartialEq)]
pub struct Rate {
    gbps: f64,
    lanes: u32,
    generation: String,
}

impl Rate {
    /// The rate as the kernel reports it, in bytes per second.
    pub fn bytes_per_second(&self) -> f64 {
        gbps_to_bytes(self.gbps)
    }

    /// The payload rate in bytes per second; `None` for an InfiniBand generation not known
    /// here (see [`Rate::generation`]).
    pub fn data_bytes_per_second(&self, ethernet: bool) -> Option<f64> {
        self.data_gbps(ethernet).map(gbps_to_bytes)
    }

    /// The InfiniBand generation as printed (`EDR`), empty when the kernel prints none.
    pub fn generation(&self) -> &str {
        &self.generation
    }

    /// Payload rate in Gb/s. Ethernet speeds are already payload rates; InfiniBand generations
    /// up to QDR lose 20% to 8b/10b, FDR and later use 64b/66b on a faster signal.
    fn data_gbps(&self, ethernet: bool) -> Option<f64> {
        if ethernet || self.gbps == 0.0 {
            return Some(self.gbps);
        }
        let per_lane = match self.generation.as_str() {
            // Kernels before 4.x print no generation for SDR.
            "" | "SDR" => 2.0,
            "DDR" => 4.0,
            "QDR" => 8.0,
            "FDR10" => 10.0,
            "FDR" => 14.0625 * 64.0 / 66.0,
            "EDR" => 25.0,
            "HDR" => 50.0,
            "NDR" => 100.0,
            "XDR" => 200.0,
            _ => return None,
        };
        Some(per_lane * f64::from(self.lanes))
    }
}

/// Parses a `rate` file's text; `path` names the file in errors (made only for one).
pub fn parse_rate(path: impl Fn() -> PathBuf, text: &str) -> Result<Rate, SysfsError> {
    let invalid = || SysfsError::parse(&path(), "expected '<n> Gb/sec (<w>X <generation>)'", text);
    let (number, rest) = text.split_once(' ').ok_or_else(invalid)?;
    let gbps: f64 = number.parse().map_err(|_| invalid())?;
    if !gbps.is_finite() || gbps < 0.0 {
        return Err(invalid());
    }
    // The kernel prints `0 GB/sec` (sic) when neither speed nor width is known: an empty cage.
    if gbps == 0.0 && rest.trim() == "GB/sec" {
        return Ok(Rate {
            gbps,
            lanes: 0,
            generation: String::new(),
        });
    }
    let inner = rest
        .strip_prefix("Gb/sec (")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(invalid)?;
    let (width, generation) = inner.split_once(' ').unwrap_or((inner, ""));
    let lanes = width
        .strip_suffix('X')
        .and_then(|w| w.parse().ok())
        .ok_or_else(invalid)?;
    Ok(Rate {
        gbps,
        lanes,
        generation: generation.to_string(),
    })
}

fn gbps_to_bytes(gbps: f64) -> f64 {
    gbps * 1e9 / 8.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Rate {
        parse_rate(|| "rate".into(), text).unwrap()
    }

    #[test]
    fn qdr_signals_40_and_carries_32() {
        let qdr = rate("40 Gb/sec (4X QDR)");
        assert_eq!(gbps_to_bytes(qdr.gbps), 5e9);
        assert_eq!(gbps_to_bytes(qdr.data_gbps(false).unwrap()), 4e9);
    }

    #[test]
    fn edr_100_is_12_5_gigabytes() {
        let edr = rate("100 Gb/sec (4X EDR)");
        assert_eq!(gbps_to_bytes(edr.gbps), 12_500_000_000.0);
        assert_eq!(edr.data_gbps(false), Some(100.0));
    }

    #[test]
    fn generations_and_widths() {
        assert_eq!(rate("200 Gb/sec (4X HDR)").data_gbps(false), Some(200.0));
        assert_eq!(rate("400 Gb/sec (4X NDR)").data_gbps(false), Some(400.0));
        assert_eq!(rate("2.5 Gb/sec (1X SDR)").data_gbps(false), Some(2.0));
        assert_eq!(rate("10 Gb/sec (4X)").data_gbps(false), Some(8.0));
        assert_eq!(rate("40 Gb/sec (4X FDR10)").data_gbps(false), Some(40.0));
        let fdr = rate("56 Gb/sec (4X FDR)").data_gbps(false).unwrap();
        assert!((fdr - 54.545_454).abs() < 1e-3, "{fdr}");
        assert_eq!(rate("300 Gb/sec (12X EDR)").data_gbps(false), Some(300.0));
        assert_eq!(rate("1600 Gb/sec (8X XXR)").data_gbps(false), None);
    }

    #[test]
    fn ethernet_rate_is_the_data_rate() {
        assert_eq!(rate("40 Gb/sec (4X QDR)").data_gbps(true), Some(40.0));
    }

    #[test]
    fn empty_cage() {
        let empty = rate("0 GB/sec");
        assert_eq!(empty.gbps, 0.0);
        assert_eq!(empty.data_gbps(false), Some(0.0));
    }

    #[test]
    fn garbage_rates_are_errors() {
        for text in [
            "fast",
            "",
            "40 Gb/sec",
            "40 Gb/sec (QDR)",
            "NaN Gb/sec (4X)",
            "-1 Gb/sec (4X)",
            "5 GB/sec",
        ] {
            assert!(parse_rate(|| "rate".into(), text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn state_ids() {
        let id = |t| parse_state_id(|| "state".into(), t);
        assert_eq!(id("4: ACTIVE").unwrap(), 4);
        assert_eq!(id("5: LinkUp").unwrap(), 5);
        assert!(id("banana").is_err());
        assert!(id(": ACTIVE").is_err());
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::prelude::*;

    const RATE_TOKENS: &[&str] = &[
        " ", "0", "1", "4", "9", ".", "e", "-", "+", "NaN", "inf", "Gb/sec", "GB/sec", "(", ")",
        "X", "4X", " EDR", " FDR10", " SDR", ":", "ACTIVE",
    ];
    const GENERATIONS: &[&str] = &[
        "", "SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR", "XXR",
    ];

    proptest! {
        #[test]
        fn any_rate_text_is_a_rate_or_an_error(text in text(RATE_TOKENS)) {
            if let Ok(rate) = parse_rate(|| "rate".into(), &text) {
                prop_assert!(rate.gbps.is_finite() && rate.gbps >= 0.0, "{rate:?}");
                for ethernet in [false, true] {
                    if let Some(data) = rate.data_bytes_per_second(ethernet) {
                        prop_assert!(data >= 0.0, "{rate:?}");
                    }
                }
            }
            if let Ok(id) = parse_state_id(|| "state".into(), &text) {
                let (printed, _) = text.split_once(':').unwrap();
                prop_assert_eq!(printed.trim().parse::<u64>(), Ok(id));
            }
        }

        /// `%d%s Gb/sec (%dX%s)` as the kernel's `rate_show` prints it.
        #[test]
        fn a_printed_rate_parses_to_what_it_says(
            whole in 0u32..2000,
            tenths in prop::option::of(0u32..10),
            lanes in prop::sample::select(&[1u32, 2, 4, 8, 12][..]),
            generation in prop::sample::select(GENERATIONS),
        ) {
            let number = match tenths {
                Some(tenths) => format!("{whole}.{tenths}"),
                None => whole.to_string(),
            };
            let width = match generation {
                "" => format!("{lanes}X"),
                generation => format!("{lanes}X {generation}"),
            };
            let rate = parse_rate(|| "rate".into(), &format!("{number} Gb/sec ({width})")).unwrap();
            prop_assert_eq!(rate.gbps, number.parse::<f64>().unwrap());
            prop_assert_eq!(rate.lanes, lanes);
            prop_assert_eq!(rate.generation(), generation);
            prop_assert_eq!(rate.bytes_per_second(), rate.gbps * 1e9 / 8.0);
            prop_assert_eq!(rate.data_bytes_per_second(true), Some(rate.bytes_per_second()));
        }

        #[test]
        fn a_printed_state_parses_to_its_id(id: u64, name in "[A-Za-z_]{0,12}") {
            prop_assert_eq!(parse_state_id(|| "state".into(), &format!("{id}: {name}")).unwrap(), id);
        }
    }
}
