//! The metric model collectors fill at scrape time: a metric's `Desc`, its samples' values,
//! and the samples of a scrape, grouped by metric for the encoder.
//!
//! Collectors describe each metric once, as a `const Desc`, and push samples against it; the
//! encoder adds the unit and `_total` suffixes, so a name is spelled in exactly one place.

mod encode;
mod labels;

pub use encode::{encode, Encodable, Format, Pieces};
pub use labels::{
    label_text, Label, LabelCache, LabelSet, LabelValue, Labels, SeriesLabels, MAX_LABEL_CHARS,
};

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

#[cfg(test)]
mod tests;
