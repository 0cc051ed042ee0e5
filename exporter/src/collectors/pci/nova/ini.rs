//! oslo.config's ini format as Nova reads `nova.conf`: an option may repeat (each line one
//! value), continuation lines are indented, and each entry keeps its line for error messages.

pub(super) struct IniEntry {
    pub(super) section: String,
    pub(super) key: String,
    pub(super) value: String,
    pub(super) line: usize,
}

/// oslo.config's ini dialect: `#`/`;` comments, `key = value` or `key: value`, indented lines
/// continue the previous value, surrounding quotes are removed, `-` in keys reads as `_`,
/// section names other than `DEFAULT` are read in lower case. Read one entry at a time, so
/// that a file of many lines holds no more memory than its longest value.
pub(super) struct IniEntries<'a> {
    lines: std::iter::Peekable<std::iter::Enumerate<std::str::Lines<'a>>>,
    section: String,
}

impl<'a> IniEntries<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        IniEntries {
            lines: text.lines().enumerate().peekable(),
            section: String::new(),
        }
    }
}

/// A line that ends a value and holds none.
fn blank_or_comment(trimmed: &str) -> bool {
    trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';')
}

impl Iterator for IniEntries<'_> {
    type Item = IniEntry;

    fn next(&mut self) -> Option<IniEntry> {
        while let Some((index, line)) = self.lines.next() {
            let trimmed = line.trim();
            if blank_or_comment(trimmed) {
                continue;
            }
            if let Some(name) = trimmed.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
                let name = name.trim();
                self.section = match name {
                    "DEFAULT" => name.to_string(),
                    _ => name.to_lowercase(),
                };
                continue;
            }
            let Some(split) = trimmed.find(['=', ':']) else {
                continue;
            };
            let mut value = trimmed[split + 1..].trim().to_string();
            let continues = |(_, line): &(usize, &str)| {
                line.starts_with([' ', '\t']) && !blank_or_comment(line.trim())
            };
            while let Some((_, line)) = self.lines.next_if(continues) {
                value.push('\n');
                value.push_str(line.trim());
            }
            let value = value.trim();
            let unquoted = ['"', '\'']
                .into_iter()
                .find_map(|q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)));
            return Some(IniEntry {
                section: self.section.clone(),
                key: trimmed[..split].trim().replace('-', "_"),
                value: unquoted.unwrap_or(value).to_string(),
                line: index + 1,
            });
        }
        None
    }
}
