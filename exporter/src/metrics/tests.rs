use std::sync::Arc;

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
