//! ARCHITECTURE.md stays true: every path its code map names exists, every source file of the
//! exporter is in the code map (a row of its own, or below a directory's row), and every source
//! module opens with the `//!` doc the code map leaves the details to. So does the kernel lab's
//! README: its tables of groups name the groups of `tests/lab/scenarios/`; every suite under
//! `tests/` has a README; the READMEs count the dashboards and rule files there are. And the
//! documents hold together: every relative link leads to a file (and heading) that exists, and
//! none leads outside the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The code map's rows: the paths of the first column, and the row's whole text.
fn code_map() -> Vec<(Vec<String>, String)> {
    let text = std::fs::read_to_string(repository().join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("\n## ")
        .find(|section| section.starts_with("Code map"))
        .expect("ARCHITECTURE.md has a '## Code map' section");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let first = line.split('|').nth(1).unwrap_or_default();
            let paths = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            (paths, line.to_string())
        })
        .collect()
}

/// Every `.rs` file below `dir`, relative to the repository.
fn sources(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        // Not following links: fixture trees are full of sysfs's cycles.
        if entry.file_type().unwrap().is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(repository()).unwrap();
            out.insert(relative.to_string_lossy().into_owned());
        }
    }
}

#[test]
fn every_path_in_the_code_map_exists() {
    let rows = code_map();
    assert!(rows.len() > 20, "the code map has only {} rows", rows.len());
    for (paths, line) in &rows {
        assert!(!paths.is_empty(), "a row without a path: {line}");
        for path in paths {
            assert!(
                repository().join(path).exists(),
                "ARCHITECTURE.md names {path}, which does not exist"
            );
        }
        // A source directory's row names its files: each must be somewhere below it.
        let source_dirs = paths
            .iter()
            .filter(|path| path.starts_with("exporter/src/") && path.ends_with('/'));
        for dir in source_dirs {
            let mut below = BTreeSet::new();
            sources(&repository().join(dir), &mut below);
            let names: Vec<&str> = line
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|name| name.ends_with(".rs") && !name.contains('/'))
                .collect();
            for name in names {
                assert!(
                    below.iter().any(|file| file.ends_with(&format!("/{name}"))),
                    "ARCHITECTURE.md's row for {dir} names {name}, which is not below it"
                );
            }
        }
    }
}

#[test]
fn every_source_module_is_in_the_code_map() {
    let rows = code_map();
    let mut files = BTreeSet::new();
    sources(&repository().join("exporter/src"), &mut files);
    files.insert("exporter/build.rs".into());
    for file in &files {
        // Below a directory's row, or a child of a `foo.rs` row (its `foo/tests.rs`).
        let covered = rows.iter().any(|(paths, _)| {
            paths.iter().any(|path| {
                let parent = path.strip_suffix(".rs").map(|module| format!("{module}/"));
                path == file
                    || (path.ends_with('/') && file.starts_with(path.as_str()))
                    || parent.is_some_and(|parent| file.starts_with(&parent))
            })
        });
        assert!(
            covered,
            "{file} is missing from ARCHITECTURE.md's code map (a row of its own, or below a directory's row)"
        );
    }
    for script in [".ci/run", "tests/run.sh", "tests/setup.sh"] {
        assert!(
            rows.iter()
                .any(|(paths, _)| paths.iter().any(|p| p == script)),
            "{script} is missing from ARCHITECTURE.md's code map"
        );
    }
}

/// The code map stays short because each module says what it owns in its own `//!` doc; a test
/// module (`tests.rs`, `proptests.rs`) belongs to the module above it.
#[test]
fn every_source_module_opens_with_its_doc() {
    let mut files = BTreeSet::new();
    sources(&repository().join("exporter/src"), &mut files);
    let undocumented: Vec<&String> = files
        .iter()
        .filter(|file| !file.ends_with("/tests.rs") && !file.ends_with("/proptests.rs"))
        .filter(|file| {
            let text = std::fs::read_to_string(repository().join(file)).unwrap();
            !text.starts_with("//!")
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "source modules without a `//!` doc on their first line: {undocumented:?}"
    );
}

#[test]
fn every_suite_under_tests_has_a_readme() {
    for entry in std::fs::read_dir(repository().join("tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert!(
                path.join("README.md").is_file(),
                "{} has no README.md",
                path.display()
            );
        }
    }
}

/// Every table of tests/lab/README.md whose first column is `group`: its section's title and
/// the names of its rows (the last row of a table of times, `all`, left out).
fn lab_group_tables(readme: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut tables = Vec::new();
    let mut section = String::new();
    let mut rows: Option<BTreeSet<String>> = None;
    for line in readme.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            section = title.to_string();
        }
        if line.starts_with("| group |") {
            rows = Some(BTreeSet::new());
        } else if let Some(names) = rows.as_mut().filter(|_| line.starts_with('|')) {
            let name = line.split('|').nth(1).unwrap_or_default().trim();
            if !name.starts_with("---") && name != "all" {
                names.insert(name.trim_matches('`').to_string());
            }
        } else if let Some(names) = rows.take() {
            tables.push((section.clone(), names));
        }
    }
    tables.extend(rows.map(|names| (section, names)));
    tables
}

#[test]
fn the_lab_readme_names_every_lab_group_and_no_other() {
    let lab = repository().join("tests/lab");
    let groups: BTreeSet<String> = std::fs::read_dir(lab.join("scenarios"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "sh"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(groups.len() > 10, "only {} lab groups", groups.len());
    let readme = std::fs::read_to_string(lab.join("README.md")).unwrap();
    let tables = lab_group_tables(&readme);
    for (section, names) in &tables {
        let unknown: Vec<_> = names.difference(&groups).collect();
        assert!(
            unknown.is_empty(),
            "tests/lab/README.md ({section}) names groups without a scenario file: {unknown:?}"
        );
    }
    let (_, described) = tables
        .iter()
        .find(|(section, _)| section == "The groups")
        .expect("tests/lab/README.md has a group table under '## The groups'");
    let missing: Vec<_> = groups.difference(described).collect();
    assert!(
        missing.is_empty(),
        "tests/lab/README.md's group table has no row for {missing:?}"
    );
}

/// Only measurements (`*_bench`) may leave the default lab (`# lab: when=named`): every group of
/// checks runs in CI, on every lab kernel. The README's group table says which run only when named.
#[test]
fn only_benches_leave_the_default_lab_and_the_readme_says_which() {
    let lab = repository().join("tests/lab");
    let readme = std::fs::read_to_string(lab.join("README.md")).unwrap();
    let row_of = |group: &str| {
        let start = format!("| `{group}` |");
        readme
            .lines()
            .find(|line| line.starts_with(&start))
            .map(str::to_owned)
    };
    for entry in std::fs::read_dir(lab.join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        let group = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let named_only = text.lines().any(|line| line == "# lab: when=named");
        assert!(
            !named_only || group.ends_with("_bench"),
            "lab group {group} runs only when named: only measurements (*_bench) may"
        );
        let row = row_of(&group).unwrap_or_default();
        let when = row.split('|').nth(2).unwrap_or_default();
        assert_eq!(
            when.contains("only when named"),
            named_only,
            "tests/lab/README.md's row for {group} ({when:?}) against its # lab: when=named"
        );
    }
}

/// Every Markdown document of the repository (README, CONTRIBUTING, docs/, METRICS,
/// ARCHITECTURE, the READMEs of alerts/, dashboards/ and tests/), outside build and cache folders.
fn documents(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        // Not following links, as in `sources`.
        if entry.file_type().unwrap().is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                documents(&entry.path(), out);
            }
        } else if name.ends_with(".md") {
            out.push(entry.path());
        }
    }
}

/// What a document points at: its links' targets, and its code spans that start with `../`;
/// and the anchors of its headings. Fenced code blocks are left out: shell or YAML, not Markdown.
#[derive(Default)]
struct Pointers {
    links: Vec<String>,
    relative_spans: Vec<String>,
    anchors: BTreeSet<String>,
}

fn pointers(text: &str) -> Pointers {
    let mut found = Pointers::default();
    let mut fenced = false;
    let mut slugs_seen = BTreeMap::<String, usize>::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(title) = heading(line) {
            // A repeated heading's anchor gets -1, -2, ...
            let slug = slug(title);
            let count = slugs_seen.entry(slug.clone()).or_default();
            found.anchors.insert(match *count {
                0 => slug,
                n => format!("{slug}-{n}"),
            });
            *count += 1;
        }
        // Code spans are the odd pieces between backticks; links live in the even ones.
        let mut prose = String::new();
        for (i, piece) in line.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(piece);
                prose.push(' ');
            } else if piece.starts_with("../") {
                found.relative_spans.push(piece.to_string());
            }
        }
        for (at, _) in prose.match_indices("](") {
            let target = prose[at + 2..].split([')', ' ']).next().unwrap_or_default();
            found.links.push(target.to_string());
        }
        // Reference definitions: `[name]: target`.
        let definition = prose.trim_start().strip_prefix('[');
        if let Some((label, target)) = definition.and_then(|rest| rest.split_once("]: ")) {
            if !label.contains(']') {
                found
                    .links
                    .extend(target.split(' ').next().map(str::to_string));
            }
        }
    }
    found
}

/// The text of an ATX heading (`## Title`), without its `#`s.
fn heading(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('#')?.trim_start_matches('#');
    rest.starts_with(' ').then_some(rest.trim())
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens, backticks and other
/// punctuation dropped.
fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// `target` taken from the folder `from` (both relative to the repository), as a path relative
/// to the repository; `None` when it climbs out of it.
fn inside_repository(from: &Path, target: &str) -> Option<PathBuf> {
    let mut path = PathBuf::new();
    for component in from.join(target).components() {
        match component {
            Component::ParentDir => {
                if !path.pop() {
                    return None;
                }
            }
            Component::Normal(name) => path.push(name),
            _ => return None,
        }
    }
    Some(path)
}

/// Each problem of every document's links, as `document: problem`.
fn link_problems() -> Vec<String> {
    let root = repository();
    let mut docs = Vec::new();
    documents(&root, &mut docs);
    let parsed: BTreeMap<PathBuf, Pointers> = docs
        .iter()
        .map(|doc| {
            let text = std::fs::read_to_string(doc).unwrap();
            (
                doc.strip_prefix(&root).unwrap().to_path_buf(),
                pointers(&text),
            )
        })
        .collect();
    for expected in ["README.md", "METRICS.md", "ARCHITECTURE.md"] {
        assert!(
            parsed.contains_key(Path::new(expected)),
            "no {expected} found"
        );
    }
    let mut problems = Vec::new();
    for (doc, found) in &parsed {
        let dir = doc.parent().unwrap();
        let shown = doc.display();
        for span in &found.relative_spans {
            if inside_repository(dir, span).is_none() {
                problems.push(format!("{shown}: `{span}` is outside the repository"));
            }
        }
        for link in &found.links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = match file {
                "" => Some(doc.clone()),
                file => inside_repository(dir, file),
            };
            let Some(target) = target else {
                problems.push(format!("{shown}: ({link}) is outside the repository"));
                continue;
            };
            if !root.join(&target).exists() {
                problems.push(format!("{shown}: ({link}) leads to no file"));
            } else if let Some(other) = parsed.get(&target).filter(|_| !anchor.is_empty()) {
                if !other.anchors.contains(anchor) {
                    problems.push(format!(
                        "{shown}: ({link}) names no heading of {}",
                        target.display()
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_in_the_documents_leads_to_something_in_the_repository() {
    let problems = link_problems();
    assert!(
        problems.is_empty(),
        "broken links in the documents:\n{}",
        problems.join("\n")
    );
}

/// The number a document spells out before `noun` ("the three Grafana dashboards").
fn spelled_count(text: &str, noun: &str) -> Option<usize> {
    const NUMBERS: [&str; 10] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    let words: Vec<String> = text
        .split_whitespace()
        .map(|word| word.to_lowercase())
        .collect();
    let at = words
        .windows(noun.split(' ').count())
        .position(|window| window.join(" ") == noun)?;
    let before = words.get(at.checked_sub(1)?)?;
    NUMBERS.iter().position(|n| n == before).map(|n| n + 1)
}

/// The files of `dir` whose names end with `suffix`.
fn files_ending(dir: &str, suffix: &str) -> BTreeSet<String> {
    std::fs::read_dir(repository().join(dir))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(suffix))
        .collect()
}

/// The README and the dashboards' README count the dashboards the tree has; the rules' README
/// has a row for every rule file and none for a file that is gone.
#[test]
fn the_documents_count_the_dashboards_and_rule_files_there_are() {
    let dashboards = files_ending("dashboards", ".json").len();
    for document in ["README.md", "dashboards/README.md"] {
        let text = std::fs::read_to_string(repository().join(document)).unwrap();
        assert_eq!(
            spelled_count(&text, "grafana dashboards"),
            Some(dashboards),
            "{document} does not say how many Grafana dashboards there are ({dashboards})"
        );
    }
    let rule_files = files_ending("alerts", ".rules.yml");
    let readme = std::fs::read_to_string(repository().join("alerts/README.md")).unwrap();
    let rows: BTreeSet<String> = readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|cell| cell.split('`').next())
        .filter(|name| name.ends_with(".rules.yml"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        rows, rule_files,
        "alerts/README.md's table against alerts/*.rules.yml"
    );
}
