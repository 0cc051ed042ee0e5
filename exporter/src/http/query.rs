//! A scrape request's query string: the `collect[]` and `exclude[]` filters, decoded as
//! `application/x-www-form-urlencoded` (Prometheus sends `params` as `collect%5B%5D=rdma`).
//! Other parameters are ignored, as node_exporter ignores them.

/// The names a query gives for `collect[]` and for `exclude[]`, in order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Filters {
    pub(super) collect: Vec<String>,
    pub(super) exclude: Vec<String>,
}

pub(super) fn filters(query: &str) -> Filters {
    let mut filters = Filters::default();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let names = match decode(key).as_str() {
            "collect[]" => &mut filters.collect,
            "exclude[]" => &mut filters.exclude,
            _ => continue,
        };
        names.push(decode(value));
    }
    filters
}

/// `+` is a space and `%XX` a byte; a `%` without two hex digits stands for itself, and bytes
/// that are not UTF-8 are replaced (no collector's name has them).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes.get(at + 1..at + 3))
            .filter(|hex| bytes[at] == b'%' && hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match (escaped, bytes[at]) {
            (Some(byte), _) => {
                decoded.push(byte);
                at += 3;
            }
            (None, b'+') => {
                decoded.push(b' ');
                at += 1;
            }
            (None, byte) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn filters_are_read_encoded_or_not_and_other_parameters_ignored() {
        let read =
            filters("collect%5B%5D=rdma&debug=1&collect[]=pci&exclude%5b%5d=mic+x&collect[]");
        assert_eq!(read.collect, ["rdma", "pci", ""]);
        assert_eq!(read.exclude, ["mic x"]);
        assert_eq!(filters(""), Filters::default());
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%+1%zz%e2%82%ac"), "% 1%zz\u{20ac}");
    }

    proptest! {
        #[test]
        fn any_query_decodes_without_panic(query in any::<String>()) {
            let _ = filters(&query);
        }

        #[test]
        fn an_encoded_name_reads_back(name in any::<String>()) {
            let encoded: String = name.bytes().map(|byte| format!("%{byte:02X}")).collect();
            prop_assert_eq!(decode(&encoded), name.clone());
            let read = filters(&format!("x=1&exclude%5B%5D={encoded}"));
            prop_assert_eq!(read.exclude, vec![name]);
        }
    }
}
