//! The command line as collectors see it: `Flags`, the typed reader every collector validates
//! its own flags with (errors worded with the flag's full name), the argument builders, and the
//! value parsers shared by several flags (durations, listen addresses).

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use regex::Regex;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unknown flag, missing value, conflicting flags: clap's message, first line only.
    #[error("{0}")]
    Flags(String),
    #[error("invalid {flag} {value:?}: {reason}")]
    Invalid {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("invalid {flag}: must not be empty")]
    EmptyPath { flag: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// `None` for `:port`, meaning every interface.
    pub host: Option<String>,
    pub port: u16,
}

/// The parsed command line as collectors see it: raw values by flag name, and errors worded
/// with the flag's full name.
#[derive(Debug)]
pub struct Flags(pub(crate) ArgMatches);

impl Flags {
    /// The value given, or the flag's default.
    pub fn value(&self, name: &str) -> Option<String> {
        self.0.get_one::<String>(name).cloned()
    }

    /// Every value of a repeatable flag, in the order given.
    pub fn values(&self, name: &str) -> Vec<String> {
        self.0
            .get_many::<String>(name)
            .map(|values| values.cloned().collect())
            .unwrap_or_default()
    }

    /// Whether `name` was on the command line, rather than left at its default.
    pub fn given(&self, name: &str) -> bool {
        self.0.value_source(name) == Some(ValueSource::CommandLine)
    }

    /// Whether a switch ([`switch`]) was given.
    pub fn is_set(&self, name: &str) -> bool {
        self.0.get_flag(name)
    }

    /// The error for a value of flag `name` that does not validate.
    pub fn invalid(&self, name: &str, value: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            flag: format!("--{name}"),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    /// A Prometheus-style duration (`500ms`, `5s`, `1m30s`) up to `max`.
    pub fn duration(&self, name: &str, max: Duration) -> Result<Option<Duration>, ConfigError> {
        self.value(name)
            .map(|value| {
                parse_duration_at_most(&value, max)
                    .map_err(|reason| self.invalid(name, &value, reason.to_string()))
            })
            .transpose()
    }

    /// An integer from `min` to `max`.
    pub fn number(&self, name: &str, min: u64, max: u64) -> Result<Option<u64>, ConfigError> {
        self.value(name)
            .map(|value| {
                parse_number(&value, min, max)
                    .map_err(|reason| self.invalid(name, &value, reason.to_string()))
            })
            .transpose()
    }

    /// A path, which must not be empty.
    pub fn path(&self, name: &str) -> Result<Option<PathBuf>, ConfigError> {
        self.value(name)
            .map(|value| self.nonempty_path(name, value))
            .transpose()
    }

    /// Every value of a repeatable path flag.
    pub fn paths(&self, name: &str) -> Result<Vec<PathBuf>, ConfigError> {
        self.values(name)
            .into_iter()
            .map(|value| self.nonempty_path(name, value))
            .collect()
    }

    fn nonempty_path(&self, name: &str, value: String) -> Result<PathBuf, ConfigError> {
        if value.is_empty() {
            return Err(ConfigError::EmptyPath {
                flag: format!("--{name}"),
            });
        }
        Ok(PathBuf::from(value))
    }

    /// A regex anchored like node_exporter's device filters: `mlx5` matches only `mlx5`.
    pub fn anchored_regex(&self, name: &str) -> Result<Option<Regex>, ConfigError> {
        self.value(name)
            .map(|value| {
                Regex::new(&format!("^(?:{value})$")).map_err(|err| {
                    // regex's message draws a caret diagram over several lines; keep the verdict.
                    let reason = err.to_string();
                    let verdict = reason.lines().last().unwrap_or("invalid regex");
                    self.invalid(name, &value, verdict.trim_start_matches("error: "))
                })
            })
            .transpose()
    }

    /// Reads `argv` against `flags` alone: how a collector's unit tests check its flags.
    pub fn parse(flags: Vec<Arg>, argv: &[&str]) -> Result<Flags, ConfigError> {
        let mut command = Command::new("test").args(flags);
        let argv = std::iter::once("test").chain(argv.iter().copied());
        command
            .try_get_matches_from_mut(argv)
            .map(Flags)
            .map_err(|err| ConfigError::Flags(first_line(&err)))
    }
}

/// A flag taking one value, with a default.
pub fn flag(name: &'static str, default: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name("VALUE")
        .default_value(default)
        .help(help)
}

/// A flag taking one value, without a default.
pub fn optional(name: impl Into<String>, value_name: &'static str, help: &'static str) -> Arg {
    let name = name.into();
    Arg::new(name.clone())
        .long(name)
        .value_name(value_name)
        .help(help)
}

/// A flag that may be given several times.
pub fn repeated(name: &'static str, value_name: &'static str, help: &'static str) -> Arg {
    optional(name, value_name, help).action(ArgAction::Append)
}

/// A flag without a value.
pub fn switch(name: impl Into<String>, help: impl Into<String>) -> Arg {
    let name = name.into();
    Arg::new(name.clone())
        .long(name)
        .action(ArgAction::SetTrue)
        .help(help.into())
}

/// `--NAME` and `--no-NAME`, the last one given winning (node_exporter's kingpin booleans).
/// Read with [`Flags::is_set`]: `Some` when either was given.
pub fn toggle(name: &str, on_help: impl Into<String>, off_help: impl Into<String>) -> [Arg; 2] {
    let off = format!("no-{name}");
    [
        switch(name, on_help).overrides_with(off.clone()),
        switch(off, off_help).overrides_with(name.to_string()),
    ]
}

impl Flags {
    /// The state of a [`toggle`]: `Some(true)` for `--NAME`, `Some(false)` for `--no-NAME`,
    /// `None` when neither was given.
    pub fn toggled(&self, name: &str) -> Option<bool> {
        if self.is_set(name) {
            Some(true)
        } else if self.is_set(&format!("no-{name}")) {
            Some(false)
        } else {
            None
        }
    }
}

pub(crate) fn first_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let first = rendered.lines().next().unwrap_or("invalid arguments");
    first.trim_start_matches("error: ").to_string()
}

/// `[host]:port`; the error is the reason.
pub fn parse_listen_address(value: &str) -> Result<ListenAddress, &'static str> {
    let (host, port) = value.rsplit_once(':').ok_or("expected [host]:port")?;
    let port = port
        .parse::<u16>()
        .map_err(|_| "port must be a number from 0 to 65535")?;
    let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    // Brackets go around the whole host or nowhere: `[::1:80` is no address.
    if bracketed.unwrap_or(host).contains(['[', ']']) {
        return Err("expected [host]:port");
    }
    if bracketed.is_none() && host.contains(':') {
        return Err("an IPv6 host must be written in brackets, e.g. [::1]:10133");
    }
    let host = bracketed.unwrap_or(host);
    Ok(ListenAddress {
        host: (!host.is_empty()).then(|| host.to_string()),
        port,
    })
}

/// Why a bounded flag value was refused; its text is the reason a [`ConfigError`] gives.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    #[error("must be an integer from {min} to {max}")]
    NotInRange { min: u64, max: u64 },
    #[error("{0}")]
    NotADuration(&'static str),
    #[error("must be at most {}", format_duration(*.0))]
    TooLong(Duration),
}

/// An integer from `min` to `max`.
pub fn parse_number(value: &str, min: u64, max: u64) -> Result<u64, BoundError> {
    match value.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(BoundError::NotInRange { min, max }),
    }
}

/// A duration as [`parse_duration`] reads it, up to `max`. Every duration flag has a bound,
/// so none can overflow the clock arithmetic it is used in.
pub fn parse_duration_at_most(value: &str, max: Duration) -> Result<Duration, BoundError> {
    let duration = parse_duration(value).map_err(BoundError::NotADuration)?;
    if duration > max {
        return Err(BoundError::TooLong(max));
    }
    Ok(duration)
}

/// `max` in the largest unit that writes it whole: `1h`, `90s`, `500ms`.
fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    match millis {
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1_000 == 0 => format!("{}s", m / 1_000),
        m => format!("{m}ms"),
    }
}

/// Prometheus-style durations: `500ms`, `5s`, `1m30s`; the error is the reason.
pub fn parse_duration(value: &str) -> Result<Duration, &'static str> {
    let mut total = Duration::ZERO;
    let mut rest = value;
    if rest.is_empty() {
        return Err("empty");
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err("expected a number followed by a unit (ms, s, m, h)");
        }
        let number: u64 = rest[..digits].parse().map_err(|_| "number too large")?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per_unit = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err("unit must be one of ms, s, m, h"),
        };
        rest = &rest[unit_len..];
        let millis = number.checked_mul(millis_per_unit).ok_or("too large")?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or("too large")?;
    }
    if total.is_zero() {
        return Err("must be greater than zero");
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        let parsed = |v: &str| parse_listen_address(v).unwrap();
        assert_eq!(
            parsed("127.0.0.1:9"),
            ListenAddress {
                host: Some("127.0.0.1".into()),
                port: 9
            }
        );
        assert_eq!(parsed("[::1]:10133").host.as_deref(), Some("::1"));
        assert!(parse_listen_address("10133").is_err());
        assert!(parse_listen_address(":99999").is_err());
        assert!(parse_listen_address("::1:80").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        for bad in ["", "0s", "5", "s", "5x", "-1s", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn bounded_values() {
        let hour = Duration::from_secs(3600);
        assert_eq!(parse_duration_at_most("1h", hour), Ok(hour));
        assert_eq!(
            parse_duration_at_most("999999999h", hour)
                .unwrap_err()
                .to_string(),
            "must be at most 1h"
        );
        assert_eq!(
            parse_duration_at_most("2s", Duration::from_millis(1500))
                .unwrap_err()
                .to_string(),
            "must be at most 1500ms"
        );
        assert_eq!(parse_number("7", 0, 7), Ok(7));
        for bad in ["8", "-1", "", "2305843009213693952", "1e3"] {
            assert_eq!(
                parse_number(bad, 0, 7).unwrap_err().to_string(),
                "must be an integer from 0 to 7",
                "{bad:?}"
            );
        }
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::test_strategies::text;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const VALUE_TOKENS: &[&str] = &[
        "0",
        "1",
        "5",
        "30",
        "18446744073709551615",
        "99999999999999999999",
        "ms",
        "s",
        "m",
        "h",
        "d",
        "µs",
        ":",
        "[",
        "]",
        "::1",
        "127.0.0.1",
        "localhost",
        " ",
        "-",
        "+",
    ];
    const UNITS: &[(&str, u64)] = &[("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000)];

    proptest! {
        #[test]
        fn any_value_is_a_duration_or_a_reason(value in text(VALUE_TOKENS)) {
            if let Ok(duration) = parse_duration(&value) {
                prop_assert!(!duration.is_zero());
            }
        }

        /// `1h30m`, `500ms`, `90s`: every term counts, in any order, and an overflow is an
        /// error rather than a panic or a wrapped value.
        #[test]
        fn written_durations_read_back(
            terms in vec((prop_oneof![0u64..1000, any::<u64>()], prop::sample::select(UNITS)), 1..5),
        ) {
            let written: String = terms.iter().map(|(n, (unit, _))| format!("{n}{unit}")).collect();
            let millis: Option<Vec<u64>> = terms.iter().map(|(n, (_, per))| n.checked_mul(*per)).collect();
            let expected = millis
                .map(|millis| millis.into_iter().map(Duration::from_millis).sum::<Duration>())
                .filter(|total| !total.is_zero());
            prop_assert_eq!(parse_duration(&written).ok(), expected);
        }

        #[test]
        fn any_value_is_a_listen_address_or_a_reason(value in text(VALUE_TOKENS)) {
            if let Ok(address) = parse_listen_address(&value) {
                // The host as written: bare, or in brackets, which an IPv6 host needs.
                let (written, _) = value.rsplit_once(':').unwrap();
                let host = address.host.unwrap_or_default();
                prop_assert!(!host.contains(['[', ']']), "{host:?}");
                let bracketed = format!("[{host}]");
                prop_assert!(written == bracketed || (written == host && !host.contains(':')));
            }
        }

        #[test]
        fn written_listen_addresses_read_back(
            host in prop_oneof![
                Just(None),
                "[a-z][a-z0-9.-]{0,20}".prop_map(Some),
                any::<Ipv4Addr>().prop_map(|ip| Some(ip.to_string())),
                any::<Ipv6Addr>().prop_map(|ip| Some(ip.to_string())),
            ],
            port: u16,
        ) {
            let written = match &host {
                Some(host) if host.contains(':') => format!("[{host}]:{port}"),
                Some(host) => format!("{host}:{port}"),
                None => format!(":{port}"),
            };
            prop_assert_eq!(parse_listen_address(&written), Ok(ListenAddress { host, port }));
        }
    }

    /// Found by `any_value_is_a_listen_address_or_a_reason`: an unclosed bracket was taken
    /// into the host, so the flag passed and the bind failed later.
    #[test]
    fn stray_brackets_are_no_host() {
        for value in [
            "[::1",
            "[::1:9100",
            "[host:9100",
            "host]:9100",
            "[[::1]]:9100",
        ] {
            assert!(parse_listen_address(value).is_err(), "{value:?}");
        }
        assert_eq!(
            parse_listen_address("[]:9100"),
            Ok(ListenAddress {
                host: None,
                port: 9100
            })
        );
    }
}
