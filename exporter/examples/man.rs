//! Writes the man page, hpcnode_exporter(1), generated from the command line the binary parses
//! (the common flags and every collector's), to stdout: `cargo run --example man`.
use std::io::Write;

fn main() -> std::io::Result<()> {
    let command = hpcnode_exporter::config::command(&hpcnode_exporter::collectors::ALL);
    let mut page = Vec::new();
    clap_mangen::Man::new(command).render(&mut page)?;
    std::io::stdout().write_all(&page)
}
