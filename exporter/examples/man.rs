//! Writes the man page, hpcnode_exporter(1), to stdout: `cargo run --example man [BINARY]`.
//! Generated from the command lines the binary parses (the common flags, every collector's, the
//! `probe` subcommands and `check`), with the sections clap does not know. Its VERSION is what
//! `BINARY --version` prints (packaging/build.sh names the binary it packages, whose build date
//! and glibc floor differ from this example's), or without BINARY this build's own.
use std::io::Write;
use std::process::Command;

use hpcnode_exporter::check;
use hpcnode_exporter::collectors::ALL;
use hpcnode_exporter::config;

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
.PP
\fBcheck\fR exits 0 when every check passed, 1 when one failed (its lines on stdout), 2 for a
bad flag, checks file or \-\-from.config, and 3 when it cannot tell (no page, a page it cannot
read, a collector a check reads failed): never drain a node on 3.
"#;

/// What the packages install (README.md's "What the packages install").
const FILES: &str = r#".SH FILES
.TP
\fI/etc/default/hpcnode_exporter\fR (.deb), \fI/etc/sysconfig/hpcnode_exporter\fR (.rpm)
The flags, as ARGS="...", which the unit passes; kept on upgrade.
.TP
\fI/usr/lib/systemd/system/hpcnode_exporter.service\fR
The systemd unit: the exporter as the system user hpcnode_exporter
(\fI/usr/lib/sysusers.d/hpcnode_exporter.conf\fR), with only the capabilities it needs.
.TP
\fI/usr/share/hpcnode_exporter/systemd/\fR
The unit's hardening drop\-ins, one per systemd version; at boot and at every daemon\-reload
\fIhpcnode_exporter\-generator\fR (in \fI/usr/lib/systemd/system\-generators/\fR) gives the
running systemd those it understands.
.TP
\fI/etc/hpcnode_exporter/checks.yml\fR
Which checks \fBhpcnode_exporter check\fR runs, their thresholds and the devices they ignore;
kept on upgrade.
.TP
\fI/etc/hpcnode_exporter/\fR
The site's own files: the \-\-web.config.file (e.g. \fIweb.yml\fR) and the verbs token file.
.TP
\fI/etc/hpcnode_exporter/rules/config.rules.yml\fR
The alerting thresholds, kept on upgrade (hpcnode\-exporter\-rules package, for the Prometheus host).
.TP
\fI/usr/share/hpcnode_exporter/rules/\fR, \fI/usr/share/hpcnode_exporter/dashboards/\fR
Prometheus alerting and recording rules, and Grafana dashboards (hpcnode\-exporter\-rules package;
\fI/etc/grafana/provisioning/dashboards/hpcnode.yml\fR provisions them).
.TP
\fI/usr/share/doc/hpcnode\-exporter/\fR (.deb), \fI/usr/share/doc/hpcnode_exporter/\fR (.rpm)
README.md, METRICS.md (every metric), docs/ (configuration, security, the collectors).
"#;

/// Pages Debian 12 ships: prometheus-node-exporter (node_exporter under Debian's name) in
/// prometheus-node-exporter, prometheus and promtool in prometheus, systemd.exec in
/// systemd, capabilities in manpages, ibstat in infiniband-diags, rdma in iproute2, ibv_devinfo
/// in ibverbs-utils, ib_write_bw in perftest (each package's file list, `dpkg -c`).
const SEE_ALSO: &str = r#".SH "SEE ALSO"
.BR prometheus (1),
.BR promtool (1),
.BR prometheus\-node\-exporter (1),
.BR systemd.exec (5),
.BR capabilities (7),
.BR ibstat (8),
.BR rdma (8),
.BR ibv_devinfo (1),
.BR ib_write_bw (1)
"#;

fn main() -> std::process::ExitCode {
    match write_page() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("man: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn write_page() -> std::io::Result<()> {
    let command = config::command(&ALL);
    let version = match std::env::args_os().nth(1) {
        Some(binary) => version_of(&binary)?,
        None => command.clone().render_long_version(),
    };
    let man = clap_mangen::Man::new(command);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    render_subcommands(&mut page)?;
    page.extend_from_slice(EXIT_STATUS.as_bytes());
    page.extend_from_slice(FILES.as_bytes());
    page.extend_from_slice(SEE_ALSO.as_bytes());
    page.extend_from_slice(version_section(&version).as_bytes());
    std::io::stdout().write_all(&page)
}

/// SUBCOMMANDS: `check` (its own options; the collection options are the ones above), then
/// each `probe <name>`, with what it does and its options.
fn render_subcommands(page: &mut Vec<u8>) -> std::io::Result<()> {
    page.extend_from_slice(b".SH SUBCOMMANDS\n");
    let check = check::command(&ALL);
    let own = config::with_collection_args(clap::Command::new("none"), &ALL);
    let own: Vec<_> = (check.get_arguments())
        .filter(|arg| {
            own.get_arguments()
                .all(|other| other.get_id() != arg.get_id())
        })
        .cloned()
        .collect();
    let about = "Run the node-readiness checks once, for Slurm's HealthCheckProgram and NHC (docs/slurm.md): one line per failure on stdout, nothing when the node is fine. Takes the collection options above (not \\-\\-web.*), and these:";
    render_subcommand(
        page,
        check.get_name(),
        about,
        clap::Command::new("check").args(own),
    )?;
    let probe = config::probe_command(&ALL);
    for sub in probe.get_subcommands() {
        let name = format!("{} {}", probe.get_name(), sub.get_name());
        let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
        render_subcommand(page, &name, &escape(&about), sub.clone())?;
    }
    Ok(())
}

/// One subcommand: its name, `about` (roff) and the options of `command`.
fn render_subcommand(
    page: &mut Vec<u8>,
    name: &str,
    about: &str,
    command: clap::Command,
) -> std::io::Result<()> {
    let head = format!(".SS \"{name} [OPTIONS]\"\n{about}\n");
    page.extend_from_slice(head.as_bytes());
    let mut options = Vec::new();
    clap_mangen::Man::new(command).render_options_section(&mut options)?;
    // The subcommand's options under its own heading, not a second OPTIONS section (the
    // lines before it define a string the title's preamble already defined).
    let options = String::from_utf8_lossy(&options);
    let body = options
        .split_once(".SH OPTIONS\n")
        .map_or("", |(_, body)| body);
    page.extend_from_slice(body.as_bytes());
    Ok(())
}

/// What `binary --version` prints; an error when it cannot run here.
fn version_of(binary: &std::ffi::OsStr) -> std::io::Result<String> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|err| std::io::Error::other(format!("{}: {err}", binary.to_string_lossy())))?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{} --version: {}",
            binary.to_string_lossy(),
            out.status
        )));
    }
    String::from_utf8(out.stdout).map_err(std::io::Error::other)
}

/// VERSION: the text of `--version`, line for line.
fn version_section(version: &str) -> String {
    let lines: String = version.lines().map(|l| escape(l) + "\n").collect();
    format!(".SH VERSION\n.nf\n{lines}.fi\n")
}

/// Plain text as roff: backslashes and hyphens escaped, no line read as a request.
fn escape(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}
