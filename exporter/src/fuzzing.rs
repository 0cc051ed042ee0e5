//! Entry points for the cargo-fuzz targets in `fuzz/`, one per parser family: each hands the
//! fuzzer's bytes to the crate's parsers the way the exporter does (text where it reads text,
//! bytes where it reads bytes, files where it reads files) and checks what must hold of any
//! result, so a wrong parse fails as a panic would. Built only with the `fuzzing` feature and
//! for tests (which replay the committed seed corpus), so the crate's API stays what it is.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::collectors::ebpf::kernel_log::{self, KernelLogCounts, Origin};
use crate::collectors::mic::micras;
use crate::collectors::pci::identity::{self, Address};
use crate::collectors::pci::{config_space, driver_modules, nova};
use crate::collectors::rdma_userspace::LIBRARIES;
use crate::collectors::verbs::oob::{self, Channel};
use crate::collectors::verbs::peer::{self, SessionError};
use crate::collectors::verbs::{PortClaims, Target};
use crate::elf_versions;
use crate::kernel::module_file::{Signature, SignatureCache};
use crate::kernel::{cmdline, keys, modprobe};
use crate::ld_cache::library_path::Watch;
use crate::ld_cache::{Cache, DEFAULT_ID, MAX_CACHE_BYTES};
use crate::netlink::devlink::{self, HEALTH_REPORTER_GET};
use crate::netlink::ethtool;
use crate::netlink::generic;
use crate::netlink::rdma::message::{Command, Dump, Resource};
use crate::netlink::rdma::reply;
use crate::netlink::route::link::{self, VfCounter};
use crate::sysfs::{AttributeReader, SysDir};
use crate::transceiver::{self, Memory, HALF_PAGE};
use crate::web_config::WebConfigFile;
use crate::{check, collectors, exposition, flags, rdma_port};

/// The micras files, in the order a fuzz input's NUL-separated parts fill them.
const MICRAS_FILES: [&str; 8] = [
    "temp", "power", "volt", "freq", "gvolt", "gfreq", "plim", "fan",
];

/// A directory of this process for the targets that read files (one per process, since
/// libFuzzer's `-jobs` runs several).
fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("hpcnode-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the fuzzing scratch directory");
        dir
    })
}

/// A sysfs attribute holding `data`, through every `SysDir` reader; its text as an RDMA
/// `rate` and `state`.
pub fn sysfs_attribute(data: &[u8]) {
    let path = scratch_dir().join("attribute");
    std::fs::write(&path, data).expect("write the attribute");
    let dir = SysDir::open(scratch_dir(), "").expect("open the scratch directory");
    let mut reader = AttributeReader::default();
    let bytes = dir.read_bytes("attribute", &mut reader).map(<[u8]>::to_vec);
    assert_eq!(bytes.is_ok(), data.len() <= 4096);
    if let Ok(number) = dir.read_u64("attribute", &mut reader) {
        assert_eq!(
            dir.read("attribute", &mut reader).unwrap().parse(),
            Ok(number)
        );
    }
    let whole = dir.read_file("attribute", 1 << 16);
    assert_eq!(
        whole.ok().as_deref(),
        Some(data).filter(|d| d.len() <= 1 << 16)
    );
    if let Ok(text) = dir.read("attribute", &mut reader) {
        if let Ok(rate) = rdma_port::parse_rate(|| path.clone(), text) {
            assert!(rate.bytes_per_second() >= 0.0);
            assert!(rate.data_bytes_per_second(false).is_none_or(|b| b >= 0.0));
        }
        let _ = rdma_port::parse_state_id(|| path.clone(), text);
    }
}

/// `/proc/modules`, and the other lists the modules collector reads: `modules.builtin`,
/// `lockdown`, the command line's blacklists, `--collector.modules.expected`.
pub fn proc_modules(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (modules, errors) = collectors::modules::parse_modules(Path::new("modules"), &text);
    let lines = text.lines().filter(|line| !line.trim().is_empty()).count();
    assert_eq!(modules.len() + errors.len(), lines);
    collectors::modules::parse_builtin_index(&text);
    collectors::modules::parse_cmdline_blacklists(&text);
    if let Some(modes) = collectors::modules::parse_lockdown(&text) {
        assert_eq!(modes.iter().filter(|(_, active)| *active).count(), 1);
    }
    let _ = collectors::modules::parse_module_list(&text);
}

/// A module file, decoded as each compression the exporter reads (none, xz, zstd, gzip) to
/// its appended signature; the input's text as `/proc/keys` and `modules.dep`, judging the
/// signers found.
pub fn module_file(data: &[u8]) {
    let files: Vec<String> = ["m.ko", "m.ko.xz", "m.ko.zst", "m.ko.gz"]
        .into_iter()
        .map(String::from)
        .collect();
    for file in &files {
        std::fs::write(scratch_dir().join(file), data).expect("write the module file");
    }
    let text = String::from_utf8_lossy(data);
    let keys = keys::parse_proc_keys(&text);
    for line in text.lines() {
        if let Some((module, _)) = line.split_once(':') {
            let _ = crate::kernel::module_file::files_to_load(&text, module.trim());
        }
    }
    let dir = SysDir::open(scratch_dir(), "").expect("open the scratch directory");
    for signature in SignatureCache::default().read(&dir, &files) {
        if let Ok(Signature::Signed(signers)) = signature {
            assert!(!signers.is_empty());
            keys.trust(&signers);
        }
    }
}

/// `modules.alias` matched against a modalias (the input's first line), and the input's
/// first two lines as an fnmatch pattern and a module name.
pub fn modules_alias(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    for module in driver_modules::matching_modules(rest, first) {
        assert!(rest.contains(module));
    }
    let second = rest.lines().next().unwrap_or_default();
    modprobe::glob_match(first.as_bytes(), second.as_bytes());
}

/// A modprobe.d file: its rules, and the install command each would run.
pub fn modprobe_d(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let file = modprobe::ConfigFile {
        path: "/etc/modprobe.d/fuzz.conf".to_string(),
        rules: modprobe::parse_rules(&text),
    };
    let modules: Vec<String> = file.rules.iter().map(|r| r.module.clone()).collect();
    for rule in &file.rules {
        assert!(!rule.module.is_empty() && !rule.module.contains('-'));
        rule.action.disables();
    }
    let rules = driver_modules::ModprobeRules::from_config(vec![file]);
    for module in modules {
        rules.install_command(&module);
    }
}

/// A kernel command line.
pub fn kernel_cmdline(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for parameter in cmdline::parameters(&text) {
        assert!(text.contains(parameter.name));
        assert!(parameter.is(&parameter.name.replace('-', "_")));
    }
}

/// A kernel log record, from `/dev/kmsg` and from the ring buffer, counted as the exporter
/// counts it.
pub fn kernel_log(data: &[u8]) {
    static COUNTS: OnceLock<std::sync::Arc<KernelLogCounts>> = OnceLock::new();
    let counts = COUNTS.get_or_init(KernelLogCounts::new);
    for text in [
        kernel_log::kmsg_record_text(data),
        kernel_log::ring_record_text(data),
        Some(String::from_utf8_lossy(data).into_owned()),
    ]
    .into_iter()
    .flatten()
    {
        counts.count_record(
            &text,
            kernel_log::kmsg_record_origin(data).unwrap_or(Origin::Unknown),
        );
    }
}

/// A card's micras files, filled from the input's NUL-separated parts (a file without a
/// part is absent).
pub fn micras(data: &[u8]) {
    let dir_path = scratch_dir().join("micras");
    std::fs::create_dir_all(&dir_path).expect("create the micras directory");
    let mut parts = data.split(|&b| b == 0);
    for name in MICRAS_FILES {
        let path = dir_path.join(name);
        match parts.next() {
            Some(part) => std::fs::write(path, part).expect("write a micras file"),
            None => drop(std::fs::remove_file(path)),
        }
    }
    let dir = SysDir::open(&dir_path, "").expect("open the micras directory");
    let out = micras::read_card_files(&dir);
    for family in out.samples.families() {
        for (_, value) in family.samples() {
            if let crate::metrics::Value::Float(value) = value {
                assert!(value.is_finite(), "{}", family.desc.name);
            }
        }
    }
}

/// A nova.conf, its specs and aliases matched against a device.
pub fn nova_config(data: &[u8]) {
    let config = nova::parse_config(&String::from_utf8_lossy(data));
    let device = nova::PciIdentity {
        address: Address::parse("0000:3b:00.0").expect("a PCI address"),
        vendor: 0x10de,
        device: 0x1eb8,
        netdevs: vec!["ens1f0".to_string()],
    };
    for spec in &config.specs {
        spec.matches(&device);
    }
    for alias in &config.aliases {
        alias.names(&device);
    }
}

/// A PCI device's `config`, as much of it as the input holds.
pub fn pci_config_space(data: &[u8]) {
    assert_eq!(config_space::parse(data).readable_bytes, data.len());
}

/// A web config and a rewrite of it (the input split at its first NUL), the first loaded at
/// start, the second taken or refused by a reload: whatever the bytes, the config in force
/// afterwards guards what the one at start did.
pub fn web_config(data: &[u8]) {
    let (first, second) = match data.iter().position(|&byte| byte == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, data),
    };
    let dir = scratch_dir().join("web");
    std::fs::create_dir_all(&dir).expect("create the web config's directory");
    let path = dir.join("web.yml");
    std::fs::write(&path, first).expect("write the web config");
    let Ok(file) = WebConfigFile::open_settling(&path, Duration::ZERO) else {
        return;
    };
    let at_start = file.current().posture();
    // A rename: another inode, so the reload sees a change even with the same bytes.
    let staged = dir.join(".web.yml");
    std::fs::write(&staged, second).expect("write the rewrite");
    std::fs::rename(&staged, &path).expect("rename the rewrite into place");
    file.look();
    let now = file.current().posture();
    assert_eq!(at_start.refuses(&now), None, "{at_start:?} became {now:?}");
}

/// PCI addresses and id attributes.
pub fn pci_identity(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(address) = Address::parse(&text) {
        assert_eq!(Address::parse(&address.to_string()), Some(address));
    }
    if let Some(id) = identity::parse_id(&text) {
        assert_eq!(identity::parse_id16(&text), u16::try_from(id).ok());
    }
}

/// A byte stream from a verbs probe peer, decoded frame after frame.
pub fn verbs_oob(data: &[u8]) {
    let mut rest = data;
    while let Ok((message, used)) = oob::decode(rest) {
        assert_eq!(oob::decode(&message.encode()), Ok((message, used)));
        rest = &rest[used..];
    }
}

/// A verbs probe peer's bytes to the responder, over loopback TCP (the peer's end then closed
/// for writing, so nothing waits on a timeout): the handshake and the session slot, with the
/// slot free and then held by another session. No input proves the token (the proof covers
/// the responder's fresh nonce), so each ends in an error: never with the slot, and never in
/// `busy`, which a peer is told only after its proof.
pub fn verbs_handshake(data: &[u8]) {
    static LISTENER: OnceLock<TcpListener> = OnceLock::new();
    let listener =
        LISTENER.get_or_init(|| TcpListener::bind("127.0.0.1:0").expect("bind a loopback port"));
    let claims = Arc::new(PortClaims::default());
    let target = Target {
        sysfs: PathBuf::from("/sys"),
        device: "fuzz0".into(),
        port: 1,
        gid_index: None,
    };
    for taken in [false, true] {
        let other_session = taken.then(|| claims.claim(&target));
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (responder, _) = listener.accept().unwrap();
        // A handshake reads two frames at most; this much fits the socket's buffer unread.
        client.write_all(&data[..data.len().min(1024)]).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut channel = Channel::new(responder, Duration::from_secs(1)).unwrap();
        match peer::admit(&mut channel, b"fuzz-token", &claims, &target) {
            Ok(_) => panic!("a peer got the session slot without the token"),
            Err(SessionError::Busy) => panic!("a peer was told busy before its proof"),
            Err(_) => {}
        }
        drop(other_session);
    }
}

/// Upper pages a transceiver fuzz input fills, in order, after the lower page; then A2h.
const TRANSCEIVER_PAGES: [u8; 5] = [0, 1, 2, 3, 0x11];

/// A transceiver's memory in 128-byte pieces: the lower page, the upper pages 00h, 01h, 02h,
/// 03h and 11h, then SFF-8472's A2h (a piece the input ends in is short, one it lacks absent),
/// decoded as the rdma collector does: a module decodes only where its pages are known.
pub fn transceiver_eeprom(data: &[u8]) {
    let mut pieces = data.chunks(HALF_PAGE).map(<[u8]>::to_vec);
    let lower = pieces.next().unwrap_or_default();
    let upper = TRANSCEIVER_PAGES.into_iter().zip(pieces.by_ref()).collect();
    let memory = Memory {
        lower,
        upper,
        a2: pieces.next().unwrap_or_default(),
    };
    let wanted = transceiver::wanted(&memory.lower);
    if let Ok(module) = transceiver::decode(&memory) {
        let wanted = wanted.expect("a decoded module has a layout");
        assert!(wanted
            .upper
            .iter()
            .all(|page| memory.upper.contains_key(page)));
        assert!(module
            .readings
            .iter()
            .all(|r| r.lane.is_none_or(|lane| (1..=8).contains(&lane))));
    }
}

/// An ELF shared object's bytes, read for its symbol versions and `.rodata` strings: what it
/// reads is bounded, and a version it defines is a name, never empty.
pub fn elf_versions(data: &[u8]) {
    if let Ok(object) = elf_versions::read_shared_object(data, |_| true) {
        assert!(object.strings.len() <= 64);
        assert!(object.strings.iter().all(|text| !text.is_empty()));
        assert!(object.needs.iter().all(|need| need.versions.len() <= 4096));
    }
}

/// A datagram of RDMA netlink replies, decoded as the reply to each dump the collector asks
/// for: whatever it accepts is bounded by what it was given.
pub fn rdma_netlink(data: &[u8]) {
    let commands = Resource::ALL.map(Command::Resources);
    let single = [
        Command::Devices,
        Command::PortCounters { port: 1 },
        Command::QpCounterMode { port: 1 },
        Command::SetQpCounterAuto { port: 1, mask: 3 },
        Command::QpCounters,
    ];
    for command in commands.into_iter().chain(single) {
        let mut dump = Dump::new(command, Some(0), 1);
        if dump.feed(data).is_ok() {
            // Each entry, device or counter takes at least one attribute header.
            let read = dump.entries.len()
                + dump.devices.len()
                + dump.counters.len()
                + dump.qp_counters.len();
            assert!(read <= data.len() / 4);
            assert!(dump.entries.len() <= reply::MAX_ENTRIES);
        }
    }
}

/// A datagram as the reply to the rdma collector's `RTM_GETLINK` for a PF's VFs.
pub fn rtnetlink_vf_stats(data: &[u8]) {
    if let Ok(vfs) = link::decode(data, 1, 1) {
        // Each VF takes at least its entry's nest, its MAC attribute and its counters' nest.
        assert!(vfs.len() <= data.len() / 12);
        assert!(vfs
            .iter()
            .all(|vf| vf.counters.len() <= VfCounter::ALL.len()));
    }
}

/// A datagram as the reply to the `rdma` collector's generic netlink requests: the ethtool
/// family's FEC counters, and one datagram of the devlink health reporters' dump.
pub fn generic_netlink(data: &[u8]) {
    if let Ok(stats) = ethtool::fec_reply(data, 0x15) {
        let counted = [
            stats.corrected_blocks,
            stats.uncorrectable_blocks,
            stats.corrected_bits,
        ];
        // Each total is eight bytes of the datagram.
        assert!(counted.iter().flatten().count() * 8 <= data.len());
    }
    if let Ok((payloads, _)) = generic::dump_part(data, 0x14, HEALTH_REPORTER_GET) {
        for payload in payloads {
            if let Ok(reporter) = devlink::health_reporter(payload) {
                assert!(reporter.name.len() < payload.len());
            }
        }
    }
}

/// An `ld.so.cache`, decoded, and as `etc/ld.so.cache` of a root the `rdma_userspace`
/// collector reads: each soname's linker entry is one of its own, and the copy the collector
/// marks resolved is the one the cache's entry names (a cache it refuses gives none).
pub fn ld_cache(data: &[u8]) {
    // The collector refuses a file longer than it reads.
    let cache = Cache::parse(data)
        .ok()
        .filter(|_| data.len() <= MAX_CACHE_BYTES);
    if let Some(cache) = &cache {
        // Each entry takes at least an old entry's 12 bytes of the input.
        assert!(cache.entries.len() <= data.len() / 12);
        for entry in &cache.entries {
            if let Some(taken) = cache.lookup(&entry.soname) {
                assert_eq!(taken.soname, entry.soname);
                assert_eq!(taken.flags, DEFAULT_ID);
                assert!(!taken.is_hwcaps_extension());
            }
        }
    }
    let root = scratch_dir().join("ld_root");
    std::fs::create_dir_all(root.join("etc")).expect("create the root's etc");
    std::fs::write(root.join("etc/ld.so.cache"), data).expect("write the cache");
    let (libraries, _) = Watch::new(&root, LIBRARIES).libraries();
    assert_eq!(libraries.cache_used, cache.is_some());
    for soname in LIBRARIES {
        let entry = cache.as_ref().and_then(|cache| cache.lookup(soname));
        assert_eq!(
            libraries.resolved(soname),
            entry.map(|entry| PathBuf::from(&entry.path)),
            "{soname}"
        );
    }
}

/// A `/metrics` page as `check` reads it, then judged by every check as built in: what it
/// reads is bounded by the text, and a failure it finds is one line whatever the page held.
pub fn exposition(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(samples) = exposition::parse(&text) else {
        return;
    };
    assert!(samples.len() <= text.lines().count());
    for sample in &samples {
        assert!(sample.labels.len() <= exposition::MAX_LABELS);
        for (index, (name, _)) in sample.labels.iter().enumerate() {
            assert!(sample.labels[..index]
                .iter()
                .all(|(other, _)| other != name));
        }
    }
    let chosen =
        check::config::parse(Path::new("checks.yml"), b"").expect("no file is the built-in checks");
    for failure in check::judge(&samples, &chosen).failures {
        assert!(!failure.to_string().contains(['\n', '\r']));
    }
}

/// Values of the flags that take durations and listen addresses.
pub fn flag_values(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(duration) = flags::parse_duration(&text) {
        assert!(!duration.is_zero());
    }
    if let Ok(address) = flags::parse_listen_address(&text) {
        let host = address.host.unwrap_or_default();
        assert!(!host.contains(['[', ']']));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every committed seed, through its target: what a fuzzing run starts from parses.
    #[test]
    fn the_seed_corpus_runs_through_every_target() {
        type Target = (&'static str, fn(&[u8]));
        let targets: [Target; 22] = [
            ("sysfs_attribute", sysfs_attribute),
            ("proc_modules", proc_modules),
            ("module_file", module_file),
            ("modules_alias", modules_alias),
            ("modprobe_d", modprobe_d),
            ("kernel_cmdline", kernel_cmdline),
            ("kernel_log", kernel_log),
            ("micras", micras),
            ("nova_config", nova_config),
            ("pci_config_space", pci_config_space),
            ("pci_identity", pci_identity),
            ("verbs_oob", verbs_oob),
            ("verbs_handshake", verbs_handshake),
            ("rdma_netlink", rdma_netlink),
            ("rtnetlink_vf_stats", rtnetlink_vf_stats),
            ("flag_values", flag_values),
            ("web_config", web_config),
            ("transceiver_eeprom", transceiver_eeprom),
            ("generic_netlink", generic_netlink),
            ("elf_versions", elf_versions),
            ("ld_cache", ld_cache),
            ("exposition", exposition),
        ];
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
        for (name, target) in targets {
            let dir = seeds.join(name);
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
            let mut count = 0;
            for entry in entries {
                let path = entry.unwrap().path();
                target(&std::fs::read(&path).unwrap());
                count += 1;
            }
            assert!(count > 0, "no seeds in {}", dir.display());
        }
        std::fs::remove_dir_all(scratch_dir()).unwrap();
    }
}
