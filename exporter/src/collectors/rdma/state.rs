//! What the rdma collector keeps of a device from one read to the next: its label values,
//! its series' label sets (per port, and per `hw_counters/` listing), and how much it pushed.

use std::sync::Arc;

use super::device_read::{PMA_COUNTERS, PMA_EXTRA_ERRORS};
use super::fec::PortFec;
use super::module_eeprom::PortModule;
use super::module_events::PortEvents;
use crate::metrics::{LabelCache, LabelSet, LabelValue, Room};
use crate::sysfs::{DirStamp, Entry};

/// What a device's read keeps for the next one: label values read from it, its series'
/// label sets, and how much it pushed.
#[derive(Default)]
pub(super) struct DeviceState {
    /// How many samples and labels the device's last read pushed.
    pub(super) pushed: Room,
    pub(super) labels: LabelCache,
    /// The label sets of each port's series, by port name; only the ports the last read
    /// used are kept.
    pub(super) ports: foldhash::HashMap<Box<str>, PortSets>,
    /// The label set of each entry of a `hw_counters/` listing, by the listing's address
    /// (its directory's held listing, the same from scrape to scrape while the directory is),
    /// so that a counter's labels cost no look-up by its name. The listing is kept with them,
    /// so its address names no other while it is here. Only the listings the last read used
    /// are kept: one whose directory changed is gone at the next read.
    pub(super) counters: foldhash::HashMap<usize, ListingSets>,
    /// The `pci_address` and `driver` label values, as read on sysfs while the device's
    /// directory had this stamp.
    pub(super) parent: Option<(DirStamp, [LabelValue; 2])>,
}

/// The label sets of a port's series whose labels are its names alone.
pub(super) struct PortSets {
    /// device, port.
    pub(super) port: LabelSet,
    /// device, port, counter: one per `PMA_COUNTERS` entry, then one per `PMA_EXTRA_ERRORS`.
    pub(super) pma: Box<[LabelSet]>,
    /// device, port, source: netlink, then sysfs.
    pub(super) sources: [LabelSet; 2],
    /// device, port, counter: hw counters over netlink, by name, as the kernel sent them.
    pub(super) netlink: foldhash::HashMap<String, LabelSet>,
    /// What the port's reads saw of its downs.
    pub(super) downs: PortDowns,
    /// The port's module as its last read decoded it.
    pub(super) module: PortModule,
    /// Where the port's netdev counts module events, as its last read found.
    pub(super) events: PortEvents,
    /// The netdev that refused the port's FEC counters.
    pub(super) fec: PortFec,
    /// Whether the read under way used it.
    used: bool,
}

impl PortSets {
    fn new(device: &LabelValue, port: &LabelValue) -> Self {
        let files = PMA_COUNTERS.iter().map(|counter| counter.file);
        let pma = (files.chain(PMA_EXTRA_ERRORS))
            .map(|file| counter_set(device, Some(port), file.into()))
            .collect();
        let source = |source: &'static str| {
            LabelSet::new(&[
                ("device", device.clone()),
                ("port", port.clone()),
                ("source", source.into()),
            ])
        };
        PortSets {
            port: LabelSet::new(&[("device", device.clone()), ("port", port.clone())]),
            pma,
            sources: [source("netlink"), source("sysfs")],
            netlink: foldhash::HashMap::default(),
            downs: PortDowns::default(),
            module: PortModule::default(),
            events: PortEvents::default(),
            fec: PortFec::default(),
            used: true,
        }
    }
}

/// A port's downs as its reads see them: what the last read saw, and the count so far.
#[derive(Default)]
pub(super) struct PortDowns {
    /// Whether the port was ACTIVE (or ACTIVE_DEFER); `None`: unread.
    active: Option<bool>,
    /// Its `link_downed` counter; `None`: unread, or no such counter.
    link_downed: Option<u64>,
    total: u64,
}

impl PortDowns {
    /// The count after a read that saw `active` and `link_downed`: it grows by the larger of
    /// `link_downed`'s increase (none across a reset, a first read or a counter gone) and one
    /// if the port was ACTIVE at the last read and is not now.
    pub(super) fn read(&mut self, active: Option<bool>, link_downed: Option<u64>) -> u64 {
        let counted = match (self.link_downed, link_downed) {
            (Some(before), Some(now)) => now.saturating_sub(before),
            _ => 0,
        };
        let seen = u64::from(self.active == Some(true) && active == Some(false));
        self.total += counted.max(seen);
        (self.active, self.link_downed) = (active, link_downed);
        self.total
    }
}

/// The labels of a per-counter series: device, port when given, counter.
pub(super) fn counter_set(
    device: &LabelValue,
    port: Option<&LabelValue>,
    counter: LabelValue,
) -> LabelSet {
    let port = port.map(|port| ("port", port.clone()));
    let labels = [
        Some(("device", device.clone())),
        port,
        Some(("counter", counter)),
    ];
    LabelSet::new(&labels.into_iter().flatten().collect::<Vec<_>>())
}

/// A `hw_counters/` listing and the label set of each of its entries.
pub(super) struct ListingSets {
    /// Held so that its address names no other listing while it is here.
    _listing: Arc<[Entry]>,
    sets: Arc<[LabelSet]>,
    /// Whether the read under way used it.
    used: bool,
}

impl DeviceState {
    /// The label set of each entry of `listing`, a `hw_counters/` directory of `port` (`None`:
    /// the device's own); an empty one for a name that is not UTF-8, which is reported, not
    /// exported.
    pub(super) fn counter_sets(
        &mut self,
        listing: &Arc<[Entry]>,
        device: &LabelValue,
        port: Option<&LabelValue>,
    ) -> Arc<[LabelSet]> {
        let address = Arc::as_ptr(listing).cast::<Entry>() as usize;
        if let Some(kept) = self.counters.get_mut(&address) {
            kept.used = true;
            return kept.sets.clone();
        }
        let sets: Arc<[LabelSet]> = (listing.iter())
            .map(|entry| match entry.name() {
                // Made for the set alone: the set is kept, not the label value.
                Ok(name) => counter_set(device, port, name.to_string().into()),
                Err(_) => LabelSet::new(&[]),
            })
            .collect();
        let kept = ListingSets {
            _listing: listing.clone(),
            sets: sets.clone(),
            used: true,
        };
        self.counters.insert(address, kept);
        sets
    }

    /// The label sets of `port`'s series, with their key, taken out for the port's read and
    /// then put back (see [`DeviceState::put_port`]).
    pub(super) fn take_port(
        &mut self,
        device: &LabelValue,
        port: &LabelValue,
    ) -> (Box<str>, PortSets) {
        (self.ports.remove_entry(port.as_str()))
            .unwrap_or_else(|| (port.as_str().into(), PortSets::new(device, port)))
    }

    pub(super) fn put_port(&mut self, (port, mut sets): (Box<str>, PortSets)) {
        sets.used = true;
        self.ports.insert(port, sets);
    }

    /// Ends a device's read that pushed `pushed`: what it did not use is dropped.
    pub(super) fn end_read(&mut self, pushed: Room) {
        self.pushed = pushed;
        self.counters
            .retain(|_, kept| std::mem::take(&mut kept.used));
        self.ports.retain(|_, kept| std::mem::take(&mut kept.used));
    }
}
