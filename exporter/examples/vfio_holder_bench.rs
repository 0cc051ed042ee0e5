//! The `pci` collector's CPU a scrape, with the vfio holders read from the `vfio_holders`
//! probe's set and without it: `vfio_holder_bench --sysfs DIR --procfs DIR [--scrapes N]
//! [--events]`. With `--events` the probe counts as attached, its set in memory (seeded by the
//! first scrape's scan, as after an attach; the map's own iteration, two bpf() calls a recorded
//! process, is not in the figure); without, no probe: the scan, kept between scrapes while
//! nothing changes. Prints the first scrape's CPU (the scan of every process, up to its budget
//! of descriptors), the mean of N after five more untimed (the seeding goes on over several
//! scrapes past the budget), what the last one said, in one line (CPU from CLOCK_PROCESS_CPUTIME_ID). tests/bench/holder_bench.py runs it on a
//! node-shaped tree; a benchmark, not a test.
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hpcnode_exporter::collectors;
use hpcnode_exporter::config::{self, Invocation};
use hpcnode_exporter::metrics::{encode, Format};
use hpcnode_exporter::scrape::{Scraper, Selection};
use hpcnode_exporter::vfio_holder_events::CandidateSet;

/// The probe's set as the kernel side would hold it, in memory.
#[derive(Default)]
struct InMemory(Mutex<BTreeMap<u32, u64>>);

impl InMemory {
    fn pids(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, u64>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CandidateSet for InMemory {
    fn entries(&self) -> Result<Vec<(u32, u64)>, String> {
        Ok(self.pids().iter().map(|(&pid, &at)| (pid, at)).collect())
    }
    fn seed(&self, pid: u32) -> Result<(), String> {
        self.pids().entry(pid).or_insert(0);
        Ok(())
    }
    fn remove(&self, pid: u32) -> Result<(), String> {
        self.pids().remove(&pid);
        Ok(())
    }
    fn dropped(&self) -> Result<u64, String> {
        Ok(0)
    }
}

/// This process's CPU time so far, every thread.
fn cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn main() -> ExitCode {
    let (mut sysfs, mut procfs, mut scrapes, mut events) = (None, None, 100u32, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--events" => events = true,
            "--sysfs" => sysfs = args.next(),
            "--procfs" => procfs = args.next(),
            "--scrapes" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) => scrapes = n,
                None => return usage(),
            },
            _ => return usage(),
        }
    }
    let (Some(sysfs), Some(procfs)) = (sysfs, procfs) else {
        return usage();
    };
    let argv = [
        "hpcnode_exporter".to_string(),
        "--collector.disable-defaults".into(),
        "--collector.pci".into(),
        format!("--path.sysfs={sysfs}"),
        format!("--path.procfs={procfs}"),
    ];
    let Ok(Invocation::Run(config)) = config::parse(argv, &collectors::ALL) else {
        eprintln!("vfio_holder_bench: the command line did not parse");
        return ExitCode::FAILURE;
    };
    let host = config.collection.host;
    if events {
        host.vfio_holder_events
            .attached(Arc::new(InMemory::default()));
    }
    let mut started = Vec::new();
    for enabled in config.collection.collectors {
        match enabled.settings.start(&host) {
            Ok(collector) => started.push((enabled.registration.name, collector)),
            Err(err) => {
                eprintln!("vfio_holder_bench: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    let scraper = Scraper::new(
        started,
        host.scrape_timeout,
        config.collection.scrape_workers,
    );
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::FAILURE;
    };
    let before = cpu();
    drop(runtime.block_on(scraper.scrape(&Selection::All)));
    let first = cpu() - before;
    for _ in 0..5 {
        drop(runtime.block_on(scraper.scrape(&Selection::All)));
    }
    let before = cpu();
    let mut last = None;
    for _ in 0..scrapes {
        last = Some(runtime.block_on(scraper.scrape(&Selection::All)));
    }
    let each = (cpu() - before) / scrapes.max(1);
    scraper.stop();
    let text = last
        .and_then(|samples| encode(samples, Format::PrometheusText).ok())
        .unwrap_or_default();
    let said = |metric: &str| {
        let values = text.lines().filter(|l| l.starts_with(metric));
        values
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    println!(
        "first_scrape_us={} scrape_us={} scrapes={scrapes} from_events={} device_holders={} scan_complete={}",
        first.as_micros(),
        each.as_micros(),
        said("hpcnode_pci_vfio_holders_from_events "),
        said("hpcnode_pci_vfio_device_holders{"),
        said("hpcnode_pci_vfio_holder_scan_complete "),
    );
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("usage: vfio_holder_bench --sysfs DIR --procfs DIR [--scrapes N] [--events]");
    ExitCode::from(2)
}
