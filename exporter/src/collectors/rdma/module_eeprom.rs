//! Cable and transceiver health of RoCE ports: the module memory of the port's netdev, read
//! over ethtool netlink (`netlink/ethtool/`, `ETHTOOL_MSG_MODULE_EEPROM_GET`, Linux 5.13+) as
//! the layout asks (`transceiver::wanted`), decoded (`transceiver/`) and exported in base
//! units with the module's own thresholds and flags.
//!
//! A read goes through the module's I2C bus and the NIC's firmware, so a port's module is read
//! at most once per `--collector.rdma.module-interval` and the scrapes between export what the
//! last read decoded. A netdev that answers `EOPNOTSUPP` (no module-EEPROM operation:
//! InfiniBand ports' mlx5i, rxe's dummy or veth, kernels before 5.13), `ENODEV` or, before 5.6,
//! `ENOENT` (no ethtool family) is not asked again until the port's netdev changes; nor is one
//! that answers `EPERM` (the request needs CAP_NET_ADMIN, which the packaged unit withholds:
//! the collector then does not ask at all and says so at start, as `privileges` reports). Only the
//! running kernel answers: the collector asks when `--path.sysfs` is `/sys` (docs/rdma.md,
//! "Cable and transceiver health").

use std::time::{Duration, Instant};

use crate::collector::Output;
use crate::error::{CollectError, ErrorKind};
use crate::metrics::{Desc, Label, LabelValue, Value};
use crate::netlink::ethtool::socket::{KeptSocket, ReadError};
use crate::netlink::ethtool::ReplyError;
use crate::netlink::generic::socket::ExchangeError;
use crate::transceiver::{self, DecodeError, Memory, Module, Quantity};

pub(super) const MODULE_INFO: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_info",
    "Pluggable module (transceiver or cable) of a RoCE port's netdev, as its memory names it; always 1.",
    None,
);
pub(super) const TEMPERATURE: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_temperature",
    "Module temperature as the module measures it.",
    Some("celsius"),
);
pub(super) const SUPPLY_VOLTAGE: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_supply_voltage",
    "Module supply voltage as the module measures it.",
    Some("volts"),
);
pub(super) const TX_BIAS: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_tx_bias",
    "Laser bias current of a transmit lane.",
    Some("amperes"),
);
pub(super) const TX_POWER: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_tx_power",
    "Optical power a transmit lane sends.",
    Some("watts"),
);
pub(super) const RX_POWER: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_rx_power",
    "Optical power a receive lane gets.",
    Some("watts"),
);
pub(super) const TEMPERATURE_THRESHOLD: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_temperature_threshold",
    "The module's own temperature limit, by level.",
    Some("celsius"),
);
pub(super) const SUPPLY_VOLTAGE_THRESHOLD: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_supply_voltage_threshold",
    "The module's own supply voltage limit, by level.",
    Some("volts"),
);
pub(super) const TX_BIAS_THRESHOLD: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_tx_bias_threshold",
    "The module's own laser bias current limit (every lane's), by level.",
    Some("amperes"),
);
pub(super) const TX_POWER_THRESHOLD: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_tx_power_threshold",
    "The module's own transmit power limit (every lane's), by level.",
    Some("watts"),
);
pub(super) const RX_POWER_THRESHOLD: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_rx_power_threshold",
    "The module's own receive power limit (every lane's), by level.",
    Some("watts"),
);
pub(super) const ALARM: Desc = Desc::gauge(
    "hpcnode_rdma_port_module_alarm",
    "1 when the module has raised its alarm or warning flag for a reading (and lane), else 0.",
    None,
);

/// A reading's family and its thresholds' family.
fn families(quantity: Quantity) -> [&'static Desc; 2] {
    match quantity {
        Quantity::Temperature => [&TEMPERATURE, &TEMPERATURE_THRESHOLD],
        Quantity::Voltage => [&SUPPLY_VOLTAGE, &SUPPLY_VOLTAGE_THRESHOLD],
        Quantity::TxBias => [&TX_BIAS, &TX_BIAS_THRESHOLD],
        Quantity::TxPower => [&TX_POWER, &TX_POWER_THRESHOLD],
        Quantity::RxPower => [&RX_POWER, &RX_POWER_THRESHOLD],
    }
}

/// The module memory of a netdev.
pub(super) trait ModuleSource: Send + Sync {
    fn read_module(&self, netdev: &str, deadline: Instant) -> Result<Memory, ReadError>;
}

/// The running kernel's answer, over a generic netlink socket kept between scrapes.
impl ModuleSource for KeptSocket {
    fn read_module(&self, netdev: &str, deadline: Instant) -> Result<Memory, ReadError> {
        self.read(deadline, |socket| socket.read_module(netdev, deadline))
    }
}

/// What one scrape's reads of modules share: where from, how often, and the scrape's clock.
pub(super) struct ModuleRead<'a> {
    pub(super) source: &'a dyn ModuleSource,
    pub(super) interval: Duration,
    pub(super) now: Instant,
    pub(super) deadline: Instant,
}

/// What a port keeps of its module between scrapes: the netdev last asked, when, and what it
/// answered.
#[derive(Default)]
pub(super) struct PortModule {
    last: Option<LastRead>,
}

struct LastRead {
    netdev: String,
    at: Instant,
    answer: Answer,
}

enum Answer {
    Decoded(Module),
    /// No module-EEPROM operation (`EOPNOTSUPP`), no such netdev (`ENODEV`), no ethtool
    /// family (`ENOENT`, before 5.6) or no CAP_NET_ADMIN (`EPERM`): not asked again.
    Unsupported,
    /// Reported when it happened; asked again after the interval.
    Failed,
}

impl PortModule {
    /// Exports the module of the port's `netdev`, read again only where the last read was
    /// of another netdev or is an interval old.
    pub(super) fn read(
        &mut self,
        modules: &ModuleRead,
        netdev: &str,
        port: [&LabelValue; 2],
        out: &mut Output,
    ) {
        let due = match &self.last {
            Some(last) if last.netdev == netdev => match last.answer {
                Answer::Unsupported => false,
                _ => modules.now.saturating_duration_since(last.at) >= modules.interval,
            },
            _ => true,
        };
        if due {
            let answer = match modules.source.read_module(netdev, modules.deadline) {
                Ok(memory) => transceiver::decode(&memory).map_err(ReadError::Decode),
                Err(err) => Err(err),
            };
            let answer = match answer {
                Ok(module) => Answer::Decoded(module),
                Err(ReadError::Exchange(ExchangeError::Reply(ReplyError::Kernel(errno))))
                    if [libc::EOPNOTSUPP, libc::ENODEV, libc::ENOENT, libc::EPERM]
                        .contains(&errno) =>
                {
                    Answer::Unsupported
                }
                Err(err) => {
                    out.errors.push(read_error(netdev, &err));
                    Answer::Failed
                }
            };
            self.last = Some(LastRead {
                netdev: netdev.to_string(),
                at: modules.now,
                answer,
            });
        }
        if let Some(LastRead {
            answer: Answer::Decoded(module),
            ..
        }) = &self.last
        {
            push(module, port, out);
        }
    }
}

fn push(module: &Module, [device, port]: [&LabelValue; 2], out: &mut Output) {
    let labels = |more: &mut dyn Iterator<Item = Label>| -> Vec<Label> {
        [("device", device.clone()), ("port", port.clone())]
            .into_iter()
            .chain(more)
            .collect()
    };
    let info = [
        ("vendor", module.vendor.clone().into()),
        ("part_number", module.part_number.clone().into()),
        ("serial", module.serial.clone().into()),
        ("type", module.type_name.into()),
    ];
    out.samples
        .push(&MODULE_INFO, labels(&mut info.into_iter()), Value::Int(1));
    let lane = |lane: Option<u8>| lane.map(|lane| ("lane", lane.to_string().into()));
    for reading in &module.readings {
        let [family, _] = families(reading.quantity);
        let labels = labels(&mut lane(reading.lane).into_iter());
        out.samples
            .push(family, labels, Value::Float(reading.value));
    }
    for threshold in &module.thresholds {
        let [_, family] = families(threshold.quantity);
        let level = ("level", threshold.level.name().into());
        let labels = labels(&mut std::iter::once(level));
        out.samples
            .push(family, labels, Value::Float(threshold.value));
    }
    for flag in &module.flags {
        let flag_labels = [
            ("reading", flag.quantity.name().into()),
            ("level", flag.level.name().into()),
            (
                "lane",
                flag.lane.map(|l| l.to_string()).unwrap_or_default().into(),
            ),
        ];
        let labels = labels(&mut flag_labels.into_iter());
        out.samples
            .push(&ALARM, labels, Value::Int(u64::from(flag.raised)));
    }
}

/// A failed read, by cause; the memory's bytes are never quoted (a module's garbage is no
/// log line).
fn read_error(netdev: &str, err: &ReadError) -> CollectError {
    let (kind, cause) = match err {
        ReadError::Decode(DecodeError::UnknownIdentifier(_)) => (
            ErrorKind::Parse,
            "identifier is not SFP, QSFP or CMIS".to_string(),
        ),
        ReadError::Decode(_) => (ErrorKind::Parse, err.to_string()),
        ReadError::Exchange(exchange) => (exchange.kind(), err.to_string()),
    };
    CollectError::new(kind, format!("module EEPROM of {netdev}: {cause}"))
}

#[cfg(test)]
pub(super) mod tests;
