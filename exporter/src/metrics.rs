//! The metric model collectors fill at scrape time, and its encoding (Prometheus text 0.0.4 and
//! OpenMetrics 1.0, both by prometheus-client).
//!
//! Collectors describe each metric once, as a `const Desc`, and push samples against it; the
//! encoder adds the unit and `_total` suffixes, so a name is spelled in exactly one place.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelSetEncoder,
    LabelValueEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// A metric's identity: base name (without unit or `_total`), help, unit, type.
#[derive(Debug, Clone, Copy)]
pub struct Desc {
    pub name: &'static str,
    pub help: &'static str,
    pub unit: Option<&'static str>,
    pub kind: Kind,
}

impl Desc {
    pub const fn gauge(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Desc {
        Desc {
            name,
            help,
            unit,
            kind: Kind::Gauge,
        }
    }

    pub const fn counter(
        name: &'static str,
        help: &'static str,
        unit: Option<&'static str>,
    ) -> Desc {
        Desc {
            name,
            help,
            unit,
            kind: Kind::Counter,
        }
    }

    /// The sample name as it appears in the 0.0.4 text format (and in METRICS.md).
    pub fn sample_name(&self) -> String {
        let mut name = self.name.to_string();
        if let Some(unit) = self.unit {
            name.push('_');
            name.push_str(unit);
        }
        if self.kind == Kind::Counter {
            name.push_str("_total");
        }
        name
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Exact integers: 64-bit byte counters exceed f64's 53-bit mantissa.
    Int(u64),
    Float(f64),
}

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

/// One metric's samples in a scrape, in the order they were pushed.
#[derive(Debug)]
pub struct Family<'a> {
    pub desc: &'a Desc,
    chunks: &'a [Chunk],
    /// Where each sample is: its chunk, and its index in the chunk. Two numbers a sample, not
    /// a copy of it: a family list lives beside the samples and the text being encoded.
    at: Vec<(u32, u32)>,
}

impl<'a> Family<'a> {
    /// Each sample's labels and value, in the order they were pushed.
    pub fn samples(&self) -> impl Iterator<Item = (SeriesLabels<'a>, Value)> + '_ {
        let chunks = self.chunks;
        (self.at.iter()).map(move |&(chunk, index)| chunks[chunk as usize].sample(index as usize))
    }
}

/// The samples one collector (or the framework) produced in one scrape.
///
/// A scrape is thousands of samples of a few dozen metrics, pushed a unit (a device) at a
/// time by several threads and then put together. Samples are kept as pushed, whatever their
/// metric, in a few flat lists per unit: no list per sample or per metric, so that a unit's
/// read allocates a handful of times however many metrics it feeds. They are grouped by
/// metric once, for the encoder.
#[derive(Debug, Default)]
pub struct Samples {
    /// The metrics pushed so far, in the order first pushed; a sample names its metric by index.
    descs: Vec<Desc>,
    /// As pushed into each [`Samples`] later appended; appending moves them whole rather
    /// than copying them into one ever larger list.
    chunks: Vec<Chunk>,
}

/// What a unit's read pushed ([`Samples::pushed`]): room to reserve for its next read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    metrics: usize,
    samples: usize,
    labels: usize,
}

/// Samples pushed into one [`Samples`].
#[derive(Debug, Default)]
struct Chunk {
    /// Every sample's labels one after the other.
    labels: Vec<Label>,
    samples: Vec<Sample>,
}

#[derive(Debug)]
struct Sample {
    /// Index in [`Samples::descs`].
    desc: usize,
    labels: SampleLabels,
    value: Value,
}

#[derive(Debug)]
enum SampleLabels {
    /// Where its labels are in [`Chunk::labels`].
    Listed {
        start: usize,
        end: usize,
    },
    Set(LabelSet),
}

impl Chunk {
    fn sample(&self, index: usize) -> (SeriesLabels<'_>, Value) {
        let sample = &self.samples[index];
        let labels = match &sample.labels {
            SampleLabels::Listed { start, end } => SeriesLabels::Listed(&self.labels[*start..*end]),
            SampleLabels::Set(set) => SeriesLabels::Set(set),
        };
        (labels, sample.value)
    }

    fn push(&mut self, desc: usize, labels: SampleLabels, value: Value) {
        self.samples.push(Sample {
            desc,
            labels,
            value,
        });
    }
}

impl Samples {
    pub fn push(&mut self, desc: &Desc, labels: impl IntoIterator<Item = Label>, value: Value) {
        let index = self.desc_index(desc);
        let chunk = self.last_chunk();
        let start = chunk.labels.len();
        chunk.labels.extend(labels);
        let end = chunk.labels.len();
        chunk.push(index, SampleLabels::Listed { start, end }, value);
    }

    /// A sample whose labels were encoded once, as a [`LabelSet`].
    pub fn push_set(&mut self, desc: &Desc, labels: &LabelSet, value: Value) {
        let index = self.desc_index(desc);
        let set = SampleLabels::Set(labels.clone());
        self.last_chunk().push(index, set, value);
    }

    /// Where pushes go: the last chunk, so that samples pushed after others were appended go
    /// on at the end, in order.
    fn last_chunk(&mut self) -> &mut Chunk {
        if self.chunks.is_empty() {
            self.chunks.push(Chunk::default());
        }
        let last = self.chunks.len() - 1;
        &mut self.chunks[last]
    }

    /// How many metrics it names, and samples and labels its last chunk holds: for a unit's
    /// own [`Samples`], into which nothing is appended, all it holds.
    pub fn pushed(&self) -> Room {
        let (samples, labels) =
            (self.chunks.last()).map_or((0, 0), |chunk| (chunk.samples.len(), chunk.labels.len()));
        Room {
            metrics: self.descs.len(),
            samples,
            labels,
        }
    }

    /// Room for as many more, so that a unit which pushes about as many every scrape (see
    /// [`Samples::pushed`]) grows no list step by step: each step is a `realloc`, which
    /// takes the allocator's lock even for a few bytes.
    pub fn reserve(&mut self, room: Room) {
        self.descs.reserve(room.metrics);
        let chunk = self.last_chunk();
        chunk.samples.reserve(room.samples);
        chunk.labels.reserve(room.labels);
    }

    /// Where `desc` is in `descs`, added when it is not yet.
    fn desc_index(&mut self, desc: &Desc) -> usize {
        // Collectors push a metric's samples together, so the last one is nearly always it;
        // a name is nearly always the same constant, found by its address alone (comparing the
        // bytes of every name passed on the way cost as much as the search).
        let by_address = self
            .descs
            .iter()
            .rposition(|d| std::ptr::eq(d.name, desc.name));
        let found = by_address.or_else(|| self.descs.iter().rposition(|d| d.name == desc.name));
        match found {
            Some(index) => index,
            None => {
                self.descs.push(*desc);
                self.descs.len() - 1
            }
        }
    }

    /// Gives back the room its lists have beyond what they hold: a unit's first read grows
    /// them step by step, up to twice what it pushed, and they are kept until the scrape is
    /// encoded (later reads reserve what the last one pushed, and give back nothing).
    pub fn shrink_to_fit(&mut self) {
        for chunk in &mut self.chunks {
            chunk.samples.shrink_to_fit();
            chunk.labels.shrink_to_fit();
        }
    }

    pub fn append(&mut self, mut other: Samples) {
        let indexes: Vec<usize> = other.descs.iter().map(|d| self.desc_index(d)).collect();
        for chunk in &mut other.chunks {
            for sample in &mut chunk.samples {
                sample.desc = indexes[sample.desc];
            }
        }
        self.chunks.append(&mut other.chunks);
    }

    /// The samples by metric, metrics in the order first pushed.
    pub fn families(&self) -> Vec<Family<'_>> {
        (self.family_index().into_iter())
            .map(|(desc, at)| Family {
                desc: &self.descs[desc],
                chunks: &self.chunks,
                at,
            })
            .collect()
    }

    /// Each metric (by its index in `descs`, in the order first pushed) with where its
    /// samples are: their chunk, and their index in it.
    fn family_index(&self) -> Vec<(usize, Vec<(u32, u32)>)> {
        let mut counts = vec![0; self.descs.len()];
        for chunk in &self.chunks {
            for sample in &chunk.samples {
                counts[sample.desc] += 1;
            }
        }
        let mut families: Vec<(usize, Vec<(u32, u32)>)> = (counts.into_iter().enumerate())
            .map(|(desc, count)| (desc, Vec::with_capacity(count)))
            .collect();
        // A scrape holds far fewer than 2^32 units' chunks, and samples in each.
        for (chunk_index, chunk) in self.chunks.iter().enumerate() {
            for (index, sample) in chunk.samples.iter().enumerate() {
                let at = (chunk_index as u32, index as u32);
                families[sample.desc].1.push(at);
            }
        }
        families
    }
}

/// Exposition formats the telemetry endpoint can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    PrometheusText,
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Encodes one scrape's samples, families sorted by name for a stable output.
pub fn encode(samples: Samples, format: Format) -> Result<String, fmt::Error> {
    Arc::new(Encodable::new(samples)).pieces(format).collect()
}

/// The most samples one piece of a response holds (see [`Pieces`]): 60 to 140 KiB of text
/// (a sample's line is 90 to 200 bytes as a rule).
const PIECE_SAMPLES: usize = 700;

/// A scrape's samples grouped by metric, families sorted by name for a stable output, to be
/// encoded a piece at a time ([`Encodable::pieces`]) as a response is written: the whole
/// text, larger than the samples, never exists at once, and concurrent responses share the
/// samples.
#[derive(Debug)]
pub struct Encodable {
    samples: Samples,
    /// Each family's metric (its index in the samples' metrics) and where its samples are.
    families: Vec<(usize, Vec<(u32, u32)>)>,
}

impl Encodable {
    pub fn new(samples: Samples) -> Self {
        let mut families = samples.family_index();
        families.sort_by(|a, b| samples.descs[a.0].name.cmp(samples.descs[b.0].name));
        Encodable { samples, families }
    }

    /// The text in `format`, a piece at a time.
    pub fn pieces(self: Arc<Self>, format: Format) -> Pieces {
        self.pieces_of(format, PIECE_SAMPLES)
    }

    fn pieces_of(self: Arc<Self>, format: Format, most_samples: usize) -> Pieces {
        Pieces {
            encodable: self,
            format,
            most_samples: most_samples.max(1),
            next: Some((0, 0)),
        }
    }
}

/// An [`Encodable`]'s text in pieces of at most `most_samples` samples each, which put
/// together are the text the format has for the whole: a family split between two pieces
/// has its header (`# HELP`, `# TYPE`, `# UNIT`) once, in the first.
pub struct Pieces {
    encodable: Arc<Encodable>,
    format: Format,
    most_samples: usize,
    /// The family and sample the next piece starts at; `None` once the text is done.
    next: Option<(usize, usize)>,
}

/// Samples of one family: its index in [`Encodable::families`], and which of its samples.
type Segment = (usize, Range<usize>);

impl Iterator for Pieces {
    type Item = Result<String, fmt::Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let (first, from) = self.next?;
        let families = &self.encodable.families;
        if first == families.len() {
            self.next = None;
            return match self.format {
                Format::PrometheusText => None,
                Format::OpenMetrics => {
                    let mut eof = String::new();
                    Some(prometheus_client::encoding::text::encode_eof(&mut eof).map(|()| eof))
                }
            };
        }
        let (mut family, mut sample, mut room) = (first, from, self.most_samples);
        let mut segments = Vec::new();
        while family < families.len() && room > 0 {
            let end = sample + room.min(families[family].1.len() - sample);
            segments.push((family, sample..end));
            room -= end - sample;
            (family, sample) = match end == families[family].1.len() {
                true => (family + 1, 0),
                false => (family, end),
            };
        }
        self.next = Some((family, sample));
        let text = self.encode(segments);
        if from == 0 {
            return Some(text);
        }
        // The family begun in the last piece: its header was written there.
        let header = self.encode(vec![(first, 0..0)]);
        Some(text.and_then(|mut text| {
            let header = header?;
            if !text.starts_with(&header) {
                return Err(fmt::Error);
            }
            text.drain(..header.len());
            Ok(text)
        }))
    }
}

impl Pieces {
    fn encode(&self, segments: Vec<Segment>) -> Result<String, fmt::Error> {
        let samples: usize = segments.iter().map(|(_, range)| range.len()).sum();
        let mut out = String::with_capacity(256 + samples * 96);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Snapshot {
            encodable: self.encodable.clone(),
            segments,
        }));
        match self.format {
            Format::PrometheusText => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
            }
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode_registry(&mut out, &registry)?
            }
        }
        Ok(out)
    }
}

/// Segments of an [`Encodable`], as prometheus-client encodes a collector.
#[derive(Debug)]
struct Snapshot {
    encodable: Arc<Encodable>,
    segments: Vec<Segment>,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Encodable { samples, families } = &*self.encodable;
        for (family, range) in &self.segments {
            let (desc, at) = &families[*family];
            let desc = &samples.descs[*desc];
            let unit = desc.unit.map(prometheus_unit);
            let metric_type = match desc.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut metric =
                encoder.encode_descriptor(desc.name, desc.help, unit.as_ref(), metric_type)?;
            for &(chunk, index) in &at[range.clone()] {
                let (labels, value) = samples.chunks[chunk as usize].sample(index as usize);
                let sample = metric.encode_family(&labels)?;
                match (desc.kind, value) {
                    (Kind::Counter, Value::Int(v)) => ConstCounter::new(v).encode(sample)?,
                    (Kind::Counter, Value::Float(v)) => ConstCounter::new(v).encode(sample)?,
                    (Kind::Gauge, Value::Int(v)) => ConstGauge::new(v).encode(sample)?,
                    (Kind::Gauge, Value::Float(v)) => ConstGauge::new(v).encode(sample)?,
                }
            }
        }
        Ok(())
    }
}

fn prometheus_unit(unit: &'static str) -> Unit {
    match unit {
        "bytes" => Unit::Bytes,
        "seconds" => Unit::Seconds,
        "celsius" => Unit::Celsius,
        "volts" => Unit::Volts,
        "amperes" => Unit::Amperes,
        other => Unit::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: Desc = Desc::counter("hpcnode_test_data", "Test bytes.", Some("bytes"));
    const STATE: Desc = Desc::gauge("hpcnode_test_state", "Test state.", None);

    fn sample_set() -> Samples {
        let mut samples = Samples::default();
        samples.push(&STATE, vec![("device", "a\"b\n".into())], Value::Int(4));
        samples.push(&BYTES, vec![("device", "x".into())], Value::Int(1 << 60));
        samples
    }

    #[test]
    fn prometheus_text_has_suffixes_sorted_families_and_exact_integers() {
        let text = encode(sample_set(), Format::PrometheusText).unwrap();
        assert_eq!(
            text,
            "# HELP hpcnode_test_data_bytes_total Test bytes.\n\
             # TYPE hpcnode_test_data_bytes_total counter\n\
             hpcnode_test_data_bytes_total{device=\"x\"} 1152921504606846976\n\
             # HELP hpcnode_test_state Test state.\n\
             # TYPE hpcnode_test_state gauge\n\
             hpcnode_test_state{device=\"a\\\"b\\n\"} 4\n"
        );
    }

    #[test]
    fn openmetrics_has_unit_and_eof() {
        let text = encode(sample_set(), Format::OpenMetrics).unwrap();
        assert!(text.contains("# TYPE hpcnode_test_data_bytes counter\n"));
        assert!(text.contains("# UNIT hpcnode_test_data_bytes bytes\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    /// A scrape's text in pieces of a few samples, put together, is the text encoded whole: a
    /// family split between pieces has its header once, and OpenMetrics its one `# EOF`.
    #[test]
    fn pieces_put_together_are_the_whole_text() {
        const SPEED: Desc = Desc::gauge("hpcnode_test_speed", "Test speed.", Some("bytes"));
        let mut samples = sample_set();
        for device in 0..7 {
            let labels = [("device", device.to_string().into())];
            samples.push(&BYTES, labels.clone(), Value::Int(device));
            samples.push(&SPEED, labels, Value::Float(device as f64 / 2.0));
        }
        let encodable = Arc::new(Encodable::new(samples));
        for format in [Format::PrometheusText, Format::OpenMetrics] {
            let text = |most| {
                let pieces = encodable.clone().pieces_of(format, most);
                pieces.collect::<Result<Vec<String>, _>>().unwrap()
            };
            let whole = text(usize::MAX);
            let eof = usize::from(format == Format::OpenMetrics);
            assert_eq!(whole.len(), 1 + eof);
            for most in 1..=16 {
                let pieces = text(most);
                assert_eq!(
                    pieces.concat(),
                    whole.concat(),
                    "{format:?}, {most} a piece"
                );
                assert_eq!(pieces.len(), 16_usize.div_ceil(most) + eof);
                for piece in &pieces {
                    let samples = piece.lines().filter(|line| !line.starts_with('#'));
                    assert!(samples.count() <= most, "{piece}");
                }
            }
        }
    }

    #[test]
    fn sample_name_matches_encoder() {
        assert_eq!(BYTES.sample_name(), "hpcnode_test_data_bytes_total");
        assert_eq!(STATE.sample_name(), "hpcnode_test_state");
    }

    #[test]
    fn appended_samples_keep_their_own_labels() {
        let mut first = Samples::default();
        first.push(
            &STATE,
            [("device", "a".into()), ("port", "1".into())],
            Value::Int(1),
        );
        first.push(&STATE, [("device", "b".into())], Value::Int(2));
        let mut second = Samples::default();
        second.push(
            &STATE,
            [("device", "c".into()), ("port", "2".into())],
            Value::Int(3),
        );
        second.push(&BYTES, [("device", "d".into())], Value::Int(4));
        first.append(second);
        first.push(&STATE, [("device", "e".into())], Value::Int(5));
        let text = encode(first, Format::PrometheusText).unwrap();
        let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            series,
            [
                "hpcnode_test_data_bytes_total{device=\"d\"} 4",
                "hpcnode_test_state{device=\"a\",port=\"1\"} 1",
                "hpcnode_test_state{device=\"b\"} 2",
                "hpcnode_test_state{device=\"c\",port=\"2\"} 3",
                "hpcnode_test_state{device=\"e\"} 5",
            ]
        );
    }

    #[test]
    fn room_reserved_from_the_last_read_changes_nothing_pushed() {
        let mut last = Samples::default();
        last.push(&STATE, [("device", "a".into())], Value::Int(1));
        last.push(
            &BYTES,
            [("device", "a".into()), ("port", "1".into())],
            Value::Int(2),
        );
        let room = |metrics, samples, labels| Room {
            metrics,
            samples,
            labels,
        };
        assert_eq!(last.pushed(), room(2, 2, 3));
        let mut next = Samples::default();
        next.reserve(last.pushed());
        next.push(&STATE, [("device", "a".into())], Value::Int(3));
        assert_eq!(next.pushed(), room(1, 1, 1));
        let text = encode(next, Format::PrometheusText).unwrap();
        let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(series, ["hpcnode_test_state{device=\"a\"} 3"]);
    }

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

#[cfg(test)]
mod proptests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;
    use crate::test_strategies::text;

    const STATE: Desc = Desc::gauge("hpcnode_test_state", "Test state.", None);
    const NAMES: [&str; 3] = ["device", "port", "counter"];

    proptest! {
        /// A label set is written as the encoder writes the same labels listed, in both
        /// formats, whatever the values hold (the encoder's escapes included).
        #[test]
        fn a_label_set_is_encoded_as_its_labels(
            values in vec(text(&["\\", "\"", "\n", ",", "=", "mlx5_0"]), 0..=3),
        ) {
            let labels: Vec<Label> = (NAMES.iter().zip(values))
                .map(|(name, value)| (*name, LabelValue::composed(value)))
                .collect();
            let set = LabelSet::new(&labels);
            for format in [Format::PrometheusText, Format::OpenMetrics] {
                let mut listed = Samples::default();
                listed.push(&STATE, labels.clone(), Value::Int(1));
                let mut encoded = Samples::default();
                encoded.push_set(&STATE, &set, Value::Int(1));
                prop_assert_eq!(encode(listed, format)?, encode(encoded, format)?);
            }
        }
    }
}
