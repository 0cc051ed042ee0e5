//! The collector contract: what every collector implements (flags, settings, start, units,
//! stop) and what it hands back from a read. It names no collector: `collectors/mod.rs` lists
//! them, and `scrape/` runs them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Arg;

pub use crate::error::{CollectError, ErrorKind, PendingErrors};
use crate::flags::{ConfigError, Flags};
use crate::metrics::{Desc, Samples};
pub use crate::roots::Root;
use crate::sysfs::{Report, SysfsError};
use crate::vfio_holder_events::HolderEvents;

/// One row of the registry (`collectors::ALL`): everything the framework needs to know about a
/// collector. Adding a collector is one module that defines its `REGISTRATION` and one row in
/// that list; `--[no-]collector.<name>` and the collector's own flags appear by themselves.
#[derive(Debug)]
pub struct Registration {
    pub name: &'static str,
    pub enabled_by_default: bool,
    pub help: &'static str,
    /// Every metric the collector can emit (checked against METRICS.md).
    pub metrics: &'static [Desc],
    /// The `--path.*` roots it reads: one that does not look like a root fails its scrapes.
    pub roots: &'static [Root],
    /// The collector's own flags; the registry adds them to the command line.
    pub flags: fn() -> Vec<Arg>,
    /// The collector's flag values, validated into settings: raw strings in, no I/O. Run for
    /// every registered collector, enabled or not, so a bad flag is an error either way.
    pub configure: fn(&Flags) -> Result<Box<dyn Settings>, ConfigError>,
    /// `hpcnode_exporter probe <name>`, for a collector that can also run once, now.
    pub probe: Option<ProbeCommand>,
}

/// A collector's validated settings; `main` starts the enabled ones once the whole command
/// line is valid, before serving.
pub trait Settings: fmt::Debug + Send {
    /// Acquires what the collector holds while the exporter runs (probes, sockets, threads,
    /// libraries) and returns it ready to scrape. An error fails the start (exit 1); a
    /// resource a node may rightly lack is reported by the collector's metrics instead.
    fn start(self: Box<Self>, host: &Host) -> Result<Started, StartError>;

    /// Whether the started collector still calls `bpf()` or attaches probes, so `main` keeps
    /// the capabilities that takes (see `privileges::StillNeeded`) when it drops the others.
    fn calls_bpf_after_start(&self) -> bool {
        false
    }
}

/// What every collector's start may use: the roots all paths are under, the deadline, and the
/// one channel between two collectors (the vfio holder probe's processes, `ebpf` to `pci`).
#[derive(Debug, Clone)]
pub struct Host {
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
    pub rootfs: PathBuf,
    pub scrape_timeout: Duration,
    pub vfio_holder_events: Arc<HolderEvents>,
}

impl Host {
    /// A tree's `sys`, `proc` and itself as the three roots, for tests.
    #[cfg(test)]
    pub fn of_tree(root: &std::path::Path) -> Host {
        Host {
            sysfs: root.join("sys"),
            procfs: root.join("proc"),
            rootfs: root.to_path_buf(),
            scrape_timeout: Duration::from_secs(10),
            vfio_holder_events: Arc::default(),
        }
    }
}

/// Why a collector could not start.
#[derive(Debug, thiserror::Error)]
#[error("starting the {collector} collector: {reason}")]
pub struct StartError {
    pub collector: &'static str,
    pub reason: String,
}

/// `hpcnode_exporter probe <name> [flags]`: one run now, a report on stdout.
#[derive(Debug)]
pub struct ProbeCommand {
    pub about: &'static str,
    pub flags: fn() -> Vec<Arg>,
    pub configure: fn(&Flags) -> Result<Box<dyn RunOnce>, ConfigError>,
}

/// A validated `probe` subcommand.
pub trait RunOnce: fmt::Debug {
    /// Whether the run passed; an error when it could not run at all.
    fn run(self: Box<Self>) -> Result<bool, Box<dyn std::error::Error>>;
}

/// What a started collector does at scrape time, split into independent units (devices) so
/// that one unit whose read hangs hides nothing but itself.
pub trait Collector: Send + Sync + 'static {
    /// What names one unit (a device name, a card, a typed PCI unit). Its `Display` must be
    /// unique among the units of one listing and non-empty: it keys the busy set and names
    /// the unit in error messages.
    type Unit: fmt::Display + Send + Sync + 'static;

    /// The units to read in this scrape, listed fresh each time. An `Err` means the collector
    /// cannot do its job at all (its success gauge goes to 0).
    fn units(&self) -> Result<Vec<Self::Unit>, CollectError>;

    /// Reads one unit: samples and per-item errors go to `out`.
    fn collect_unit(&self, unit: &Self::Unit, out: &mut Output);

    /// Releases what `start` acquired (threads, sockets, probes), on SIGTERM or SIGINT.
    fn stop(&self) {}
}

/// A started collector, its unit type erased, as the scraper holds it.
pub struct Started(pub(crate) Arc<dyn Erased>);

/// [`Collector`] with its unit type erased, for the scraper to hold collectors of every kind.
pub(crate) trait Erased: Send + Sync {
    /// Lists the units ([`Collector::units`]), each bound to the collector that reads it.
    fn list(self: Arc<Self>) -> Result<Vec<Box<dyn ErasedUnit>>, CollectError>;
    fn stop(&self);
}

/// One listed unit, bound to its collector: its `Display` names it as the unit's does.
pub(crate) trait ErasedUnit: fmt::Display + Send + Sync {
    /// [`Collector::collect_unit`] of this unit.
    fn collect(&self, out: &mut Output);
}

impl<C: Collector> Erased for C {
    fn list(self: Arc<Self>) -> Result<Vec<Box<dyn ErasedUnit>>, CollectError> {
        let units = self.units()?;
        let bound = units.into_iter().map(|unit| {
            let collector = self.clone();
            Box::new(Bound { collector, unit }) as Box<dyn ErasedUnit>
        });
        Ok(bound.collect())
    }

    fn stop(&self) {
        Collector::stop(self)
    }
}

struct Bound<C: Collector> {
    collector: Arc<C>,
    unit: C::Unit,
}

impl<C: Collector> fmt::Display for Bound<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.unit.fmt(f)
    }
}

impl<C: Collector> ErasedUnit for Bound<C> {
    fn collect(&self, out: &mut Output) {
        self.collector.collect_unit(&self.unit, out)
    }
}

impl Started {
    pub fn new(collector: impl Collector) -> Self {
        Started(Arc::new(collector))
    }
}

impl fmt::Debug for Started {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Started")
    }
}

/// What reading one unit produced.
#[derive(Default)]
pub struct Output {
    pub samples: Samples,
    pub errors: Vec<CollectError>,
}

impl Output {
    /// The value, or `None` after counting the error.
    pub fn reported<T>(&mut self, result: Result<T, SysfsError>) -> Option<T> {
        result.map_err(|err| self.errors.push(err.into())).ok()
    }

    /// The value of something a driver or kernel may rightly lack: `None` when it, or a
    /// directory on its path, does not exist; any other failure is counted and gives `None`.
    /// The one not-found rule of every collector (`sysfs::UnitRead` applies it to a unit's
    /// reads, through the same `SysfsError::is_absent`).
    pub fn optional<T>(&mut self, result: Result<T, SysfsError>) -> Option<T> {
        match result {
            Err(err) if err.is_absent() => None,
            result => self.reported(result),
        }
    }
}

/// A unit's sysfs read (`sysfs::UnitRead`) counts its errors here.
impl Report for Output {
    fn report(&mut self, err: SysfsError) {
        self.errors.push(err.into());
    }
}
