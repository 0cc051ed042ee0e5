use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::test_strategies::text;

const TOKENS: &[&str] = &[
    "hpcnode_up",
    "{",
    "}",
    "=",
    "\"",
    ",",
    "\\",
    "\\\"",
    "\\n",
    " ",
    "\t",
    "\n",
    "#",
    "1",
    "-1.5e3",
    "NaN",
    "+Inf",
    "device",
    "_",
    ":",
];

/// A label value with the characters the format escapes, and any other.
fn label_value() -> impl Strategy<Value = String> {
    vec(
        prop_oneof![Just('"'), Just('\\'), Just('\n'), any::<char>()],
        0..12,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn written_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        (0u64..1 << 53).prop_map(|n| n as f64),
    ]
}

/// A sample as the text format writes it (Go's client: `%g`-like values, escaped labels).
fn write(sample: &Sample) -> String {
    let labels: Vec<String> = (sample.labels.iter())
        .map(|(name, value)| {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect();
    let value = match sample.value {
        v if v.is_nan() => "NaN".to_string(),
        v if v == f64::INFINITY => "+Inf".to_string(),
        v if v == f64::NEG_INFINITY => "-Inf".to_string(),
        v => format!("{v:?}"),
    };
    format!("{}{{{}}} {value}", sample.name, labels.join(","))
}

fn written_sample() -> impl Strategy<Value = Sample> {
    (
        "[a-zA-Z_:][a-zA-Z0-9_:]{0,30}",
        vec(("[a-zA-Z_][a-zA-Z0-9_]{0,12}", label_value()), 0..6),
        written_value(),
    )
        .prop_map(|(name, labels, value)| {
            // Label names are unique within a sample.
            let mut unique: Vec<(String, String)> = Vec::new();
            for (label, value) in labels {
                if !unique.iter().any(|(known, _)| *known == label) {
                    unique.push((label, value));
                }
            }
            Sample {
                name,
                labels: unique,
                value,
            }
        })
}

proptest! {
    #[test]
    fn any_text_is_samples_or_a_line_error(input in text(TOKENS)) {
        match parse(&input) {
            Ok(samples) => prop_assert!(samples.len() <= input.lines().count()),
            Err(ExpositionError::Line { line, .. }) => {
                prop_assert!(line >= 1 && line <= input.split('\n').count());
            }
            Err(err) => prop_assert!(false, "{err}"),
        }
    }

    #[test]
    fn written_samples_read_back(samples in vec(written_sample(), 0..20)) {
        let page: String = samples.iter().map(|s| format!("{}\n", write(s))).collect();
        let read = parse(&page).unwrap();
        prop_assert_eq!(read.len(), samples.len());
        for (read, written) in read.iter().zip(&samples) {
            prop_assert_eq!(&read.name, &written.name);
            prop_assert_eq!(&read.labels, &written.labels);
            prop_assert!(
                read.value == written.value || (read.value.is_nan() && written.value.is_nan())
            );
        }
    }
}
