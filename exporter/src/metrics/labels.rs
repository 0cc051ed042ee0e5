//! Label values and label sets: the one rule for text from the node (bounded, no control
//! characters), the per-unit cache that shares repeated values, and labels encoded once.

use std::fmt;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
};

/// A label value: static text, or shared text cloned into many samples without allocating
/// (a device name labels hundreds of series).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelValue {
    Static(&'static str),
    Shared(Arc<str>),
}

impl LabelValue {
    /// Text the exporter composed itself, kept whole: an eBPF probe's failure reason, which
    /// names every hook tried with the kernel's error for it. Text read from the node is not
    /// this; it goes through `From<String>`.
    pub fn composed(text: String) -> Self {
        LabelValue::Shared(text.into())
    }

    pub fn as_str(&self) -> &str {
        match self {
            LabelValue::Static(text) => text,
            LabelValue::Shared(text) => text,
        }
    }
}

impl From<&'static str> for LabelValue {
    fn from(text: &'static str) -> Self {
        LabelValue::Static(text)
    }
}

/// Text from the node (a file's content, a directory or link name, a kernel parameter, a
/// config value, a kernel log line) as a label value: control characters removed, at most
/// [`MAX_LABEL_CHARS`] characters. The one rule for every label value that is neither a
/// constant nor [`LabelValue::composed`] (METRICS.md says so).
impl From<String> for LabelValue {
    fn from(text: String) -> Self {
        LabelValue::Shared(label_text(text).into())
    }
}

/// Label values from the node that repeat scrape after scrape (a device name, its firmware
/// version, a port number, a LID), each made once and then shared: a scrape allocates nothing
/// for them. (A series whose labels are all such names keeps a [`LabelSet`] instead.) At most
/// `max` are kept; when full, the cache starts over, so values the node stopped giving (an old
/// firmware version, a LID the subnet manager moved) go in time.
///
/// One per unit (see `sysfs::HeldByUnit`), not one per collector: units read at once would
/// wait on its lock and share its values' reference counts across CPUs.
#[derive(Debug)]
pub struct LabelCache {
    /// Looked up for many samples, by text the kernel names: a fast hash.
    values: HashMap<Box<str>, LabelValue>,
    max: usize,
}

impl Default for LabelCache {
    /// Room for one unit's values: an RDMA device has about 5 per port (its number, LIDs,
    /// link layer, network device), so a switchdev device with hundreds of representor ports
    /// fits too.
    fn default() -> Self {
        LabelCache::new(4096)
    }
}

impl LabelCache {
    pub fn new(max: usize) -> Self {
        LabelCache {
            values: HashMap::new(),
            max,
        }
    }

    /// `text` as [`LabelValue::from`] makes it. Text longer than a label value may be is made
    /// each time, not kept: a key is the text as read, up to a page.
    pub fn get(&mut self, text: &str) -> LabelValue {
        if let Some(value) = self.values.get(text) {
            return value.clone();
        }
        if text.len() > MAX_CACHED_TEXT {
            return LabelValue::from(text.to_string());
        }
        if self.values.len() >= self.max {
            self.values.clear();
        }
        let value = LabelValue::from(text.to_string());
        self.values.insert(text.into(), value.clone());
        value
    }
}

/// The longest text [`LabelCache`] keeps, in bytes: a label value's longest in UTF-8.
const MAX_CACHED_TEXT: usize = 4 * MAX_LABEL_CHARS;

/// The longest label value taken from the node, in characters; longer ones are cut.
pub const MAX_LABEL_CHARS: usize = 160;

/// `text` bounded to [`MAX_LABEL_CHARS`] characters with control characters (C0, DEL, C1:
/// terminal escapes, newlines) removed; returned as it is when it is already so.
pub fn label_text(text: String) -> String {
    if text.len() <= MAX_LABEL_CHARS && !text.chars().any(char::is_control) {
        return text;
    }
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_LABEL_CHARS)
        .collect()
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

pub type Labels = Vec<(&'static str, LabelValue)>;

/// One label: its name and value.
pub type Label = (&'static str, LabelValue);

/// A series' labels encoded once, as both formats write them (`device="mlx5_0",port="1"`),
/// for a series that comes back scrape after scrape with the same labels (a port's counter):
/// its samples then cost their value, not a list of labels to fill, drop and encode again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSet(Arc<str>);

impl LabelSet {
    pub fn new(labels: &[Label]) -> Self {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = write_labels(&mut text, labels);
        LabelSet(text.into())
    }
}

/// `labels` as the exposition formats write them between the braces: `name="value"`, comma
/// separated, with `\`, `"` and newline escaped in values (the only escapes either has).
fn write_labels(out: &mut impl fmt::Write, labels: &[Label]) -> fmt::Result {
    for (index, (name, value)) in labels.iter().enumerate() {
        if index > 0 {
            out.write_char(',')?;
        }
        out.write_str(name)?;
        out.write_str("=\"")?;
        let value = value.as_str();
        let mut plain = 0;
        for (at, byte) in value.bytes().enumerate() {
            let escaped = match byte {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                b'\n' => "\\n",
                _ => continue,
            };
            out.write_str(&value[plain..at])?;
            out.write_str(escaped)?;
            plain = at + 1;
        }
        out.write_str(&value[plain..])?;
        out.write_char('"')?;
    }
    Ok(())
}

/// A sample's labels: listed, or a [`LabelSet`].
#[derive(Debug, Clone, Copy)]
pub enum SeriesLabels<'a> {
    Listed(&'a [Label]),
    Set(&'a LabelSet),
}

/// The labels as the exposition formats write them (without the braces).
impl fmt::Display for SeriesLabels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeriesLabels::Listed(labels) => write_labels(f, labels),
            SeriesLabels::Set(set) => f.write_str(&set.0),
        }
    }
}

impl EncodeLabelSet for SeriesLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        match self {
            SeriesLabels::Listed(labels) => labels.encode(encoder),
            SeriesLabels::Set(set) if set.0.is_empty() => Ok(()),
            // Already encoded: written through a label's key writer, which (in both text
            // formats) writes what it is given after the separator; the value writer would
            // escape it again. `a_label_set_is_encoded_as_its_labels` holds the encoder to it.
            SeriesLabels::Set(set) => {
                let mut label = encoder.encode_label();
                fmt::Write::write_str(&mut label.encode_label_key()?, &set.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_label_is_made_once_by_the_one_rule() {
        let mut cache = LabelCache::new(1);
        let (LabelValue::Shared(first), LabelValue::Shared(again)) = (
            cache.get("rx\twrite_requests"),
            cache.get("rx\twrite_requests"),
        ) else {
            panic!("text from the node is shared");
        };
        assert!(Arc::ptr_eq(&first, &again), "made twice");
        assert_eq!(&*first, "rxwrite_requests");
        // Full: the cache starts over with the new value, made by the same rule.
        assert_eq!(cache.get("\x1bport").as_str(), "port");
        assert_eq!(cache.values.len(), 1);
        let LabelValue::Shared(after) = cache.get("rx\twrite_requests") else {
            panic!("text from the node is shared");
        };
        assert!(!Arc::ptr_eq(&first, &after), "kept beyond the bound");
        // Text longer than a label value is not kept.
        let long = "x".repeat(MAX_CACHED_TEXT + 1);
        assert_eq!(cache.get(&long).as_str().len(), MAX_LABEL_CHARS);
        assert!(!cache.values.contains_key(long.as_str()));
    }

    #[test]
    fn label_text_from_the_node_is_bounded_and_without_control_characters() {
        let label = |text: &str| LabelValue::from(text.to_string());
        assert_eq!(label("MT_0000000223").as_str(), "MT_0000000223");
        assert_eq!(label("\x1b[31mred\x07\u{85}\t\n").as_str(), "[31mred");
        let long = "é".repeat(MAX_LABEL_CHARS + 1);
        assert_eq!(label(&long).as_str(), &long[..2 * MAX_LABEL_CHARS]);
        let reason = "x".repeat(500);
        assert_eq!(LabelValue::composed(reason.clone()).as_str(), reason);
    }
}
