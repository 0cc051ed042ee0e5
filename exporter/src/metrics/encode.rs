//! The encoding of a scrape's samples into Prometheus text 0.0.4 or OpenMetrics 1.0 (both by
//! prometheus-client), a piece at a time so a response never holds its whole text.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::{Kind, Samples, Value};

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

    pub(super) fn pieces_of(self: Arc<Self>, format: Format, most_samples: usize) -> Pieces {
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
