use super::*;
use crate::metrics::{encode, Desc, Format, Samples, Value};

fn sample(name: &str, labels: &[(&str, &str)], value: f64) -> Sample {
    Sample {
        name: name.into(),
        labels: (labels.iter())
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
        value,
    }
}

fn line_error(text: &str) -> ExpositionError {
    parse(text).expect_err(text)
}

/// The exporter's own golden pages (real collector output on the fixture trees), with the
/// durations they mask given back a value: every sample line is a sample.
#[test]
fn every_golden_page_reads_back_sample_for_sample() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut pages = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let text = text.replace(" <duration>", " 0.0012");
        let samples = parse(&text).unwrap();
        let lines = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        assert_eq!(samples.len(), lines.count());
        assert!(samples.iter().any(|s| s.name == "hpcnode_build_info"));
        pages += 1;
    }
    assert!(pages >= 10, "{pages} golden pages");
}

/// What the exporter's encoder writes (prometheus-client) reads back: escapes, integers
/// beyond 2^53 as the nearest float, special values.
#[test]
fn the_encoders_text_reads_back() {
    const STATE: Desc = Desc::gauge("hpcnode_test_state", "Test.", None);
    const BYTES: Desc = Desc::counter("hpcnode_test_data", "Test.", Some("bytes"));
    let mut samples = Samples::default();
    samples.push(&STATE, vec![("device", "a\"b\\c\nd".into())], Value::Int(4));
    samples.push(
        &STATE,
        vec![("device", "inf".into())],
        Value::Float(f64::INFINITY),
    );
    samples.push(&BYTES, Vec::new(), Value::Int(1 << 60));
    let text = encode(samples, Format::PrometheusText).unwrap();
    assert_eq!(
        parse(&text).unwrap(),
        [
            sample("hpcnode_test_data_bytes_total", &[], (1u64 << 60) as f64),
            sample("hpcnode_test_state", &[("device", "a\"b\\c\nd")], 4.0),
            sample("hpcnode_test_state", &[("device", "inf")], f64::INFINITY),
        ]
    );
}

#[test]
fn the_text_formats_spellings() {
    let text = "# HELP x y\n\n  \tup 1\nx{} -Inf\nx{a=\"1\",} NaN 1712345678000\nx { a = \"\" , b=\"=,}\" } +Inf \n";
    let samples = parse(text).unwrap();
    assert_eq!(samples.len(), 4);
    assert_eq!(samples[0], sample("up", &[], 1.0));
    assert_eq!(samples[1].value, f64::NEG_INFINITY);
    assert!(samples[2].value.is_nan());
    assert_eq!(samples[2].label("a"), "1");
    assert_eq!(samples[3].labels.len(), 2);
    assert_eq!(samples[3].label("b"), "=,}");
    assert_eq!(samples[3].label("missing"), "");
    assert_eq!(samples[3].value, f64::INFINITY);
}

#[test]
fn a_line_it_cannot_read_is_named_not_quoted() {
    for (text, reason) in [
        ("up\n", "a value that is not a number"),
        ("up one\n", "a value that is not a number"),
        ("9up 1\n", "no metric name"),
        ("up{9=\"\"} 1\n", "no label name"),
        ("up{a} 1\n", "no '=' after a label name"),
        ("up{a=b} 1\n", "a label value not in quotes"),
        ("up{a=\"b\" c=\"d\"} 1\n", "no ',' or '}' after a label"),
        ("up{a=\"b} 1\n", "a label value without its closing quote"),
        (
            "up{a=\"\\t\"} 1\n",
            "an escape other than \\\\, \\\" or \\n in a label value",
        ),
        ("up{a=\"1\",a=\"2\"} 1\n", "a label given twice"),
        ("up 1 1.5\n", "a timestamp that is not an integer"),
        ("up 1 2 3\n", "text after the timestamp"),
        ("up 1\r\n", "a value that is not a number"),
    ] {
        let line = 1;
        assert_eq!(
            line_error(text),
            ExpositionError::Line { line, reason },
            "{text:?}"
        );
    }
    assert_eq!(
        line_error("# ok\nup 1\nsecret{token=\"hunter2\" 1\n").to_string(),
        "line 3: no ',' or '}' after a label"
    );
}

#[test]
fn bounds() {
    let labels: Vec<String> = (0..=MAX_LABELS).map(|n| format!("l{n}=\"\"")).collect();
    let wide = format!("up{{{}}} 1\n", labels.join(","));
    assert_eq!(
        line_error(&wide),
        ExpositionError::Line {
            line: 1,
            reason: "more labels than a sample may have"
        }
    );
    let most = format!("up{{{}}} 1\n", labels[..MAX_LABELS].join(","));
    assert_eq!(parse(&most).unwrap()[0].labels.len(), MAX_LABELS);
    let large = "#".repeat(MAX_TEXT_BYTES + 1);
    assert_eq!(
        line_error(&large),
        ExpositionError::TooLarge {
            bytes: MAX_TEXT_BYTES + 1
        }
    );
}
