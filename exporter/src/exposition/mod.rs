//! Prometheus text exposition 0.0.4 read back into samples: what `check` reads, from a running
//! exporter's `/metrics` or from its own scrape encoded as that exporter would serve it.
//!
//! As Prometheus' own text parser reads it (`expfmt.TextParser`): a sample line is a metric
//! name, optionally `{name="value",...}` (a trailing comma allowed; `\\`, `\"` and `\n` the only
//! escapes in a value), a value as Go's `ParseFloat` writes them (`NaN`, `+Inf`, `-Inf`
//! included) and an optional integer timestamp, separated by blanks; `#` lines (HELP, TYPE,
//! anything else) and empty lines carry no sample. A line it cannot read is an error naming
//! the line, never its content: a page comes from another process, whose text is no log's.
//!
//! Bounded: text beyond [`MAX_TEXT_BYTES`] is refused whole, and a sample with more than
//! [`MAX_LABELS`] labels is an error, so what a page costs is linear in its size.

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// The most text read: a node of 1000 RDMA devices serves 6 MB.
pub const MAX_TEXT_BYTES: usize = 64 << 20;
/// The most labels a sample may have: the exporter's widest metric has eleven.
pub const MAX_LABELS: usize = 64;

/// One sample of a page.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In the order written.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `name`; empty when the sample has none, as PromQL matches it.
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|(label, _)| label == name)
            .map_or("", |(_, value)| value)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpositionError {
    #[error("{bytes} bytes, more than the {MAX_TEXT_BYTES} read")]
    TooLarge { bytes: usize },
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: &'static str },
}

/// Every sample of `text`, in the order written.
pub fn parse(text: &str) -> Result<Vec<Sample>, ExpositionError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(ExpositionError::TooLarge { bytes: text.len() });
    }
    let mut samples = Vec::new();
    for (index, line) in text.split('\n').enumerate() {
        let line = line.trim_start_matches(BLANKS);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = Cursor { rest: line }
            .sample()
            .map_err(|reason| ExpositionError::Line {
                line: index + 1,
                reason,
            })?;
        samples.push(sample);
    }
    Ok(samples)
}

/// What separates the tokens of a line (the text format's blanks).
const BLANKS: [char; 2] = [' ', '\t'];

/// The unread rest of one line.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    fn sample(mut self) -> Result<Sample, &'static str> {
        let name = self.name(is_metric_start, is_metric_char, "no metric name")?;
        self.skip_blanks();
        let labels = match self.rest.strip_prefix('{') {
            Some(rest) => {
                self.rest = rest;
                self.labels()?
            }
            None => Vec::new(),
        };
        self.skip_blanks();
        let value = self.token();
        let value = parse_value(value).ok_or("a value that is not a number")?;
        self.skip_blanks();
        let timestamp = self.token();
        if !timestamp.is_empty() && timestamp.parse::<i64>().is_err() {
            return Err("a timestamp that is not an integer");
        }
        self.skip_blanks();
        if !self.rest.is_empty() {
            return Err("text after the timestamp");
        }
        Ok(Sample {
            name: name.to_string(),
            labels,
            value,
        })
    }

    /// The pairs up to and with the closing `}` (the `{` already read).
    fn labels(&mut self) -> Result<Vec<(String, String)>, &'static str> {
        let mut labels: Vec<(String, String)> = Vec::new();
        loop {
            self.skip_blanks();
            if let Some(rest) = self.rest.strip_prefix('}') {
                self.rest = rest;
                return Ok(labels);
            }
            if labels.len() == MAX_LABELS {
                return Err("more labels than a sample may have");
            }
            let name = self.name(is_label_start, is_label_char, "no label name")?;
            if labels.iter().any(|(known, _)| known == name) {
                return Err("a label given twice");
            }
            self.skip_blanks();
            self.rest = self
                .rest
                .strip_prefix('=')
                .ok_or("no '=' after a label name")?;
            self.skip_blanks();
            self.rest = (self.rest.strip_prefix('"')).ok_or("a label value not in quotes")?;
            let value = self.quoted()?;
            labels.push((name.to_string(), value));
            self.skip_blanks();
            match self.rest.strip_prefix(',') {
                Some(rest) => self.rest = rest,
                None if self.rest.starts_with('}') => {}
                None => return Err("no ',' or '}' after a label"),
            }
        }
    }

    /// A label value up to and with its closing quote (the opening one already read).
    fn quoted(&mut self) -> Result<String, &'static str> {
        let mut value = String::new();
        let mut chars = self.rest.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[at + 1..];
                    return Ok(value);
                }
                '\\' => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err("an escape other than \\\\, \\\" or \\n in a label value"),
                },
                c => value.push(c),
            }
        }
        Err("a label value without its closing quote")
    }

    /// A name whose first character passes `start` and the others `rest`.
    fn name(
        &mut self,
        start: fn(u8) -> bool,
        rest: fn(u8) -> bool,
        missing: &'static str,
    ) -> Result<&'a str, &'static str> {
        let bytes = self.rest.as_bytes();
        if !bytes.first().is_some_and(|&b| start(b)) {
            return Err(missing);
        }
        let end = bytes.iter().position(|&b| !rest(b)).unwrap_or(bytes.len());
        // Every byte up to `end` is ASCII: a character boundary.
        let (name, after) = self.rest.split_at(end);
        self.rest = after;
        Ok(name)
    }

    /// Up to the next blank or the end of the line.
    fn token(&mut self) -> &'a str {
        let end = self.rest.find(BLANKS).unwrap_or(self.rest.len());
        let (token, after) = self.rest.split_at(end);
        self.rest = after;
        token
    }

    fn skip_blanks(&mut self) {
        self.rest = self.rest.trim_start_matches(BLANKS);
    }
}

fn is_metric_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b':'
}

fn is_metric_char(b: u8) -> bool {
    is_metric_start(b) || b.is_ascii_digit()
}

fn is_label_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_label_char(b: u8) -> bool {
    is_label_start(b) || b.is_ascii_digit()
}

/// A value as Go's `strconv.ParseFloat` writes one: decimal, `NaN`, `+Inf`, `-Inf`. Rust's
/// parser takes those spellings, case aside, and no Go writes others.
fn parse_value(token: &str) -> Option<f64> {
    if token.is_empty() {
        return None;
    }
    token.parse().ok()
}
