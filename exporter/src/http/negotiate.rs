//! What a scrape's response is: the exposition format and gzip, from the request's `Accept`
//! and `Accept-Encoding`.

use crate::metrics::Format;

/// Media ranges of an `Accept`-style header with their quality (`q`, default 1).
fn media_ranges(header: &str) -> impl Iterator<Item = (&str, f32)> {
    header.split(',').filter_map(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().filter(|m| !m.is_empty())?;
        let quality = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        Some((media, quality))
    })
}

/// OpenMetrics when the client ranks it above the text format (Prometheus does), else 0.0.4.
pub fn negotiate_format(accept: &str) -> Format {
    let mut openmetrics = 0.0f32;
    let mut text = 0.0f32;
    for (media, quality) in media_ranges(accept) {
        match media.to_ascii_lowercase().as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
            "text/plain" | "text/*" | "*/*" => text = text.max(quality),
            _ => {}
        }
    }
    if openmetrics > 0.0 && openmetrics > text {
        Format::OpenMetrics
    } else {
        Format::PrometheusText
    }
}

pub fn accepts_gzip(accept_encoding: &str) -> bool {
    media_ranges(accept_encoding)
        .any(|(coding, quality)| coding.eq_ignore_ascii_case("gzip") && quality > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_scrape_accept_header_gets_openmetrics() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate_format(prometheus), Format::OpenMetrics);
    }

    #[test]
    fn default_and_text_preference_get_text() {
        assert_eq!(negotiate_format(""), Format::PrometheusText);
        assert_eq!(negotiate_format("*/*"), Format::PrometheusText);
        assert_eq!(
            negotiate_format("text/plain;version=0.0.4,application/openmetrics-text;q=0.5"),
            Format::PrometheusText
        );
        assert_eq!(
            negotiate_format("application/openmetrics-text;q=0"),
            Format::PrometheusText
        );
    }

    #[test]
    fn gzip_negotiation() {
        assert!(accepts_gzip("gzip"));
        assert!(accepts_gzip("deflate, GZIP;q=0.5"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("br"));
        assert!(!accepts_gzip(""));
    }
}
