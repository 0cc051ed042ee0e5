//! Writes the man page, hpcnode_exporter(1), generated from the command line the binary parses
//! (the common flags and every collector's), to stdout: `cargo run --example man`.
use std::io::Write;

/// What main.rs's exit codes mean, in roff.
const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Stopped by SIGTERM or SIGINT after in-flight requests finished; or \-\-help, \-\-version.
.TP
\fB1\fR
A collector could not start (\-\-collector.ebpf.strict with a probe missing, an unreadable
verbs token file), a second signal cut shutdown short, or a probe run failed.
.TP
\fB2\fR
A bad flag, or a value out of its range (never clamped); one line says which.
.TP
\fB3\fR
A listener could not be had: a \-\-web.listen\-address in use or not on this node, or
\-\-web.systemd\-socket without a socket passed by systemd. Nothing else has started.
"#;

fn main() -> std::io::Result<()> {
    let command = hpcnode_exporter::config::command(&hpcnode_exporter::collectors::ALL);
    let man = clap_mangen::Man::new(command);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    page.extend_from_slice(EXIT_STATUS.as_bytes());
    man.render_version_section(&mut page)?;
    std::io::stdout().write_all(&page)
}
