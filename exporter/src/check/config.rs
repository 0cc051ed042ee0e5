//! `--checks FILE` (by default `/etc/hpcnode_exporter/checks.yml`): which checks count, their
//! thresholds, and the devices each ignores. Absent at the default path: every check as built
//! in. Present, it must be whole and right: a key it does not know, a check that does not
//! exist, a threshold on a check without one, a pattern that is no regex: each is an error
//! naming the line or the field, never a check quietly left as built in. Read as every file a
//! flag names is read (regular files only, bounded, never blocking on a FIFO).
//!
//! ```yaml
//! checks:
//!   pci_link_width:
//!     enabled: true
//!     threshold: 0.5
//!   pci_driver:
//!     ignore: ['0000:3b:00\.0']   # regexes, anchored, on the device the line names
//! ```

use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Deserialize;

use super::checks::{Check, ALL};
use crate::sysfs::{read_named_file, SysfsError};
use crate::web_config::describe_yaml_error;

/// The checks file of a packaged install.
pub const DEFAULT_PATH: &str = "/etc/hpcnode_exporter/checks.yml";
/// A larger file is refused: the shipped one is a few KiB.
const MAX_FILE_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ChecksFileError {
    #[error(transparent)]
    File(SysfsError),
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// What the file says of one check, the built-in defaults filled in.
#[derive(Debug)]
pub struct Chosen {
    pub check: &'static Check,
    pub enabled: bool,
    /// The threshold in force; NaN for a check without one.
    pub threshold: f64,
    /// Devices whose failures do not count.
    pub ignore: Vec<Regex>,
}

impl Chosen {
    fn built_in(check: &'static Check) -> Self {
        Chosen {
            check,
            enabled: check.enabled_by_default,
            threshold: check.threshold.as_ref().map_or(f64::NAN, |t| t.default),
            ignore: Vec::new(),
        }
    }

    pub fn ignores(&self, device: &str) -> bool {
        self.ignore.iter().any(|regex| regex.is_match(device))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFile {
    checks: RawChecks,
}

/// The `checks` map, every entry in order: a check named twice is an error, not the later
/// entry quietly taking the place of the earlier.
#[derive(Debug, Default)]
struct RawChecks(Vec<(String, RawCheck)>);

impl<'de> Deserialize<'de> for RawChecks {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = RawChecks;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of check names")
            }
            fn visit_unit<E>(self) -> Result<RawChecks, E> {
                Ok(RawChecks::default())
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawChecks, A::Error> {
                let mut entries: Vec<(String, RawCheck)> = Vec::new();
                while let Some((name, check)) = map.next_entry::<String, RawCheck>()? {
                    if entries.iter().any(|(known, _)| *known == name) {
                        return Err(serde::de::Error::custom("duplicate check"));
                    }
                    entries.push((name, check));
                }
                Ok(RawChecks(entries))
            }
        }
        deserializer.deserialize_any(Entries)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawCheck {
    enabled: Option<bool>,
    threshold: Option<f64>,
    ignore: Vec<String>,
}

/// Every check as `path` chooses; `given`: the path was on the command line, where an absent
/// file is an error too.
pub fn load(path: &Path, given: bool) -> Result<Vec<Chosen>, ChecksFileError> {
    match read_named_file(path, MAX_FILE_BYTES) {
        Ok(bytes) => parse(path, &bytes),
        Err(err) if err.is_absent() && !given => Ok(ALL.iter().map(Chosen::built_in).collect()),
        Err(err) => Err(ChecksFileError::File(err)),
    }
}

/// The checks as `bytes`, read from `path`, choose them.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Chosen>, ChecksFileError> {
    let invalid = |reason: String| ChecksFileError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text".into()))?;
    // Only comments: every check as built in, as with no file.
    let raw = serde_norway::from_str::<Option<RawFile>>(text)
        .map_err(|err| invalid(describe_yaml_error(&err)))?
        .unwrap_or_default();
    let entries = &raw.checks.0;
    let named = |name: &str| entries.iter().find(|(n, _)| n == name).map(|(_, c)| c);
    let unknown = entries.iter().map(|(name, _)| name);
    if let Some(unknown) = unknown
        .into_iter()
        .find(|name| !ALL.iter().any(|c| c.name == *name))
    {
        let known: Vec<&str> = ALL.iter().map(|check| check.name).collect();
        return Err(invalid(format!(
            "checks.{unknown}: no such check (the checks: {})",
            known.join(", ")
        )));
    }
    let mut chosen = Vec::new();
    for check in &ALL {
        let mut this = Chosen::built_in(check);
        let Some(raw) = named(check.name) else {
            chosen.push(this);
            continue;
        };
        let field = |name: &str| format!("checks.{}.{name}", check.name);
        this.enabled = raw.enabled.unwrap_or(this.enabled);
        if let Some(threshold) = raw.threshold {
            if check.threshold.is_none() {
                return Err(invalid(format!(
                    "{}: this check has no threshold",
                    field("threshold")
                )));
            }
            if !threshold.is_finite() {
                return Err(invalid(format!(
                    "{}: not a finite number",
                    field("threshold")
                )));
            }
            this.threshold = threshold;
        }
        for (index, pattern) in raw.ignore.iter().enumerate() {
            let regex = Regex::new(&format!("^(?:{pattern})$")).map_err(|_| {
                invalid(format!(
                    "{}[{index}]: not a regular expression",
                    field("ignore")
                ))
            })?;
            this.ignore.push(regex);
        }
        chosen.push(this);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests;
