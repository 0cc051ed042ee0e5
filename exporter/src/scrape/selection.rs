//! Which started collectors one scrape runs, as node_exporter's `collect[]` and `exclude[]`
//! query filters choose them: every one, only those `collect[]` names (each must be enabled),
//! or every one but those `exclude[]` names (a name not enabled excludes nothing).

/// A set of the scraper's collectors. Equal selections may share one collection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selection {
    All,
    /// By the collector's position among the started ones; never every one (that is `All`).
    Only(Box<[bool]>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectionError {
    #[error("collect[] and exclude[] cannot be combined")]
    Combined,
    #[error("collect[]: {0} is not an enabled collector")]
    NotEnabled(String),
}

/// Longest name echoed back: every collector's name is far shorter.
const MAX_SHOWN_NAME: usize = 64;

impl Selection {
    /// The selection of `collect` and `exclude` (a request's names) among `enabled`.
    pub(super) fn new(
        enabled: &[&str],
        collect: &[String],
        exclude: &[String],
    ) -> Result<Selection, SelectionError> {
        let chosen: Box<[bool]> = match (collect.is_empty(), exclude.is_empty()) {
            (true, true) => return Ok(Selection::All),
            (false, false) => return Err(SelectionError::Combined),
            (false, true) => {
                if let Some(unknown) = collect
                    .iter()
                    .find(|name| !enabled.contains(&name.as_str()))
                {
                    return Err(SelectionError::NotEnabled(shown(unknown)));
                }
                enabled
                    .iter()
                    .map(|name| collect.iter().any(|c| c == *name))
                    .collect()
            }
            (true, false) => (enabled.iter())
                .map(|name| !exclude.iter().any(|e| e == *name))
                .collect(),
        };
        Ok(match chosen.iter().all(|&chosen| chosen) {
            true => Selection::All,
            false => Selection::Only(chosen),
        })
    }

    /// Whether the collector at `position` among the started ones runs.
    pub(super) fn runs(&self, position: usize) -> bool {
        match self {
            Selection::All => true,
            Selection::Only(chosen) => chosen[position],
        }
    }
}

/// A requested name as the error shows it: quoted when it could be a collector's, so that no
/// markup or control character of a request is sent back.
fn shown(name: &str) -> String {
    let plausible = name.len() <= MAX_SHOWN_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    match plausible {
        true => format!("\"{name}\""),
        false => "a name given".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENABLED: &[&str] = &["rdma", "modules", "pci"];

    fn select(collect: &[&str], exclude: &[&str]) -> Result<Selection, SelectionError> {
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        Selection::new(ENABLED, &owned(collect), &owned(exclude))
    }

    fn running(selection: &Selection) -> Vec<&'static str> {
        (0..ENABLED.len())
            .filter(|&i| selection.runs(i))
            .map(|i| ENABLED[i])
            .collect()
    }

    #[test]
    fn collect_runs_the_named_and_exclude_the_others() {
        assert_eq!(
            running(&select(&["pci", "rdma", "pci"], &[]).unwrap()),
            ["rdma", "pci"]
        );
        assert_eq!(
            running(&select(&[], &["rdma", "ebpf"]).unwrap()),
            ["modules", "pci"]
        );
        assert_eq!(running(&select(&[], ENABLED).unwrap()), [] as [&str; 0]);
    }

    #[test]
    fn every_collector_is_the_unfiltered_selection() {
        assert_eq!(select(&[], &[]), Ok(Selection::All));
        assert_eq!(select(&["rdma", "modules", "pci"], &[]), Ok(Selection::All));
        assert_eq!(select(&[], &["ebpf"]), Ok(Selection::All));
    }

    #[test]
    fn a_name_not_enabled_or_both_filters_are_refused() {
        assert_eq!(select(&["rdma"], &["pci"]), Err(SelectionError::Combined));
        assert_eq!(
            select(&["rdma", "ebpf"], &[]).unwrap_err().to_string(),
            "collect[]: \"ebpf\" is not an enabled collector"
        );
        assert_eq!(
            select(&["<script>"], &[]).unwrap_err().to_string(),
            "collect[]: a name given is not an enabled collector"
        );
        assert!(select(&[""], &[]).is_err());
    }
}
