use super::file_name::INLINE_NAME;
use super::*;
use crate::error::ErrorKind;
use crate::sysfs::tests::{dir_with, mkfifo, settle};
use crate::sysfs::AttributeReader;
use crate::sysfs::HeldByUnit;
use std::fs;
use std::path::Path;

/// A set of held attributes with a budget of its own, `limit` descriptors.
fn held_within(limit: usize) -> (&'static HeldBudget, HeldAttributes) {
    let budget: &'static HeldBudget = Box::leak(Box::new(HeldBudget::new(limit)));
    (budget, HeldAttributes::with_budget(budget))
}

/// A held attribute reads what the file holds now: rewritten in place (the same inode,
/// read again at offset 0), replaced by a rename (the held inode has no name left), removed
/// and made again. One descriptor is held all along.
#[test]
fn a_held_attribute_reads_the_file_as_it_is_now() {
    let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n")]);
    let (budget, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    let mut read = |held: &mut HeldAttributes| {
        let text = dir.read_held("port_rcv_data", held, &mut reader);
        text.map(str::to_string)
    };
    assert_eq!(read(&mut held).unwrap(), "1");
    let path = tmp.path().join("port_rcv_data");
    fs::write(&path, "22\n").unwrap();
    assert_eq!(read(&mut held).unwrap(), "22");
    fs::write(tmp.path().join("new"), "333\n").unwrap();
    fs::rename(tmp.path().join("new"), &path).unwrap();
    assert_eq!(read(&mut held).unwrap(), "333");
    assert_eq!((held.len(), budget.held()), (1, 1));
    fs::remove_file(&path).unwrap();
    assert!(read(&mut held).unwrap_err().is_not_found());
    assert_eq!((held.len(), budget.held()), (0, 0));
    fs::write(&path, "4\n").unwrap();
    assert_eq!(read(&mut held).unwrap(), "4");
    assert_eq!((held.len(), budget.held()), (1, 1));
}

/// Reads in any order, across directories and through another [`SysDir`] of the same
/// directory, each get their own file's content, from the descriptors held the first time.
#[test]
fn reads_in_any_order_find_their_own_file() {
    let (tmp, root) = dir_with(&[]);
    for port in ["1", "2"] {
        fs::create_dir(tmp.path().join(port)).unwrap();
        for counter in ["a", "b", "c"] {
            fs::write(
                tmp.path().join(port).join(counter),
                format!("{port}{counter}"),
            )
            .unwrap();
        }
        settle(&tmp.path().join(port));
    }
    let (_, mut held) = held_within(16);
    let mut reader = AttributeReader::default();
    let orders = [
        ["1a", "1b", "2a", "1c", "2b", "2c"],
        ["2c", "1a", "1c", "2a", "2b", "1b"],
        ["1c", "1b", "1a", "2c", "2b", "2a"],
    ];
    for order in orders {
        // Each round opens its directories again, as a scrape does.
        let ports = [root.subdir("1").unwrap(), root.subdir("2").unwrap()];
        for name in order {
            let (port, counter) = name.split_at(1);
            let dir = &ports[usize::from(port == "2")];
            assert_eq!(
                dir.read_held(counter, &mut held, &mut reader).unwrap(),
                name
            );
        }
        held.end_round();
        assert_eq!(held.len(), 6);
    }
}

/// A directory's files, all added in one round, keep no room for more after it (a scrape
/// at 64 HCAs holds 8128 of them).
#[test]
fn a_round_leaves_no_room_to_grow() {
    let names: Vec<String> = (0..33).map(|i| format!("counter_{i}")).collect();
    let files: Vec<(&str, &str)> = names.iter().map(|name| (name.as_str(), "1")).collect();
    let (tmp, dir) = dir_with(&files);
    settle(tmp.path());
    let (_, mut held) = held_within(64);
    let mut reader = AttributeReader::default();
    for name in &names {
        dir.read_held(name, &mut held, &mut reader).unwrap();
    }
    let files = |held: &HeldAttributes| {
        let dir = held.dirs.values().next().unwrap();
        (dir.files.len(), dir.files.capacity())
    };
    assert!(files(&held).1 >= 48, "grew by doubling: {:?}", files(&held));
    held.end_round();
    let (len, capacity) = files(&held);
    assert_eq!(len, 33);
    assert!(capacity <= len + len / 8, "{capacity} for {len}");
}

/// Names too long to keep inline are held and found as the short ones are.
#[test]
fn a_long_name_is_held_as_a_short_one() {
    let long = "x".repeat(INLINE_NAME + 1);
    let short = "x".repeat(INLINE_NAME);
    let (tmp, dir) = dir_with(&[(&long, "long"), (&short, "short")]);
    settle(tmp.path());
    let (_, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    for round in ["", "again"] {
        fs::write(tmp.path().join(&long), format!("long{round}")).unwrap();
        for (name, content) in [(&short, "short"), (&long, "long"), (&short, "short")] {
            let text = dir.read_held(name, &mut held, &mut reader).unwrap();
            let content = if name == &long {
                format!("{content}{round}")
            } else {
                content.into()
            };
            assert_eq!(text, content);
        }
        held.end_round();
        assert_eq!(held.len(), 2);
    }
}

/// In a settled directory no file is checked on its own: the directory's look tells a
/// file renamed over, removed or made since the last round (its modification time moves),
/// and a file rewritten in place is read fresh by `pread`.
#[test]
fn a_settled_directory_tells_its_files_changed() {
    let (tmp, dir) = dir_with(&[("port_rcv_data", "1\n"), ("port_xmit_data", "5\n")]);
    let (budget, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    let mut round = |held: &mut HeldAttributes| {
        let mut texts = Vec::new();
        for name in ["port_rcv_data", "port_xmit_data"] {
            let text = dir.read_held(name, held, &mut reader);
            texts.push(text.map_or_else(|err| err.to_string(), str::to_string));
        }
        held.end_round();
        texts
    };
    let path = |name: &str| tmp.path().join(name);
    settle(tmp.path());
    assert_eq!(round(&mut held), ["1", "5"]);
    assert!(!held.dirs.values().any(|dir| dir.check_links));
    fs::write(path("port_rcv_data"), "2\n").unwrap();
    assert_eq!(round(&mut held), ["2", "5"]);
    fs::write(path("new"), "3\n").unwrap();
    fs::rename(path("new"), path("port_rcv_data")).unwrap();
    assert_eq!(round(&mut held), ["3", "5"]);
    settle(tmp.path());
    assert_eq!(round(&mut held), ["3", "5"]);
    fs::remove_file(path("port_xmit_data")).unwrap();
    fs::write(path("port_xmit_data"), "6\n").unwrap();
    settle(tmp.path());
    assert_eq!(round(&mut held), ["3", "6"]);
    assert_eq!((held.len(), budget.held()), (2, 2));
}

/// An attribute a settled directory lacks is remembered as absent, with no failed open
/// per round, until the directory changes: a file made behind its back (the directory's
/// time set back) stays absent, and is read once the directory's time moves.
#[test]
fn an_absent_attribute_is_remembered_until_its_directory_changes() {
    let (tmp, dir) = dir_with(&[("vendor", "0x10de\n")]);
    let (_, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    let mut round = |held: &mut HeldAttributes| {
        let text = dir.read_held("sriov_totalvfs", held, &mut reader);
        held.end_round();
        text.map(str::to_string)
    };
    settle(tmp.path());
    assert!(round(&mut held).unwrap_err().is_not_found());
    let settled = fs::metadata(tmp.path()).unwrap().modified().unwrap();
    fs::write(tmp.path().join("sriov_totalvfs"), "8\n").unwrap();
    let directory = fs::File::open(tmp.path()).unwrap();
    directory.set_modified(settled).unwrap();
    assert!(round(&mut held).unwrap_err().is_not_found());
    settle(tmp.path());
    assert_eq!(round(&mut held).unwrap(), "8");
}

/// A held subdirectory is the one its parent holds now: the same descriptor while the
/// parent stays as it was, the new directory once one is renamed in its place; one the
/// parent lacks stays absent until the parent changes.
#[test]
fn a_held_subdirectory_is_the_one_its_parent_holds_now() {
    let (tmp, dir) = dir_with(&[]);
    let path = |name: &str| tmp.path().join(name);
    fs::create_dir(path("counters")).unwrap();
    fs::write(path("counters/port_rcv_data"), "1\n").unwrap();
    settle(&path("counters"));
    settle(tmp.path());
    let (budget, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    let mut round = |held: &mut HeldAttributes, name: &str| {
        let read = held.fixed_subdir(&dir, name).and_then(|subdir| {
            let text = subdir.read_held("port_rcv_data", held, &mut reader)?;
            Ok((text.to_string(), subdir))
        });
        held.end_round();
        read
    };
    let (first, counters) = round(&mut held, "counters").unwrap();
    let (again, same) = round(&mut held, "counters").unwrap();
    assert_eq!((first.as_str(), again.as_str()), ("1", "1"));
    assert!(Arc::ptr_eq(&counters, &same));
    // The file, the subdirectory and the root it keeps open.
    assert_eq!((held.len(), budget.held()), (2, 3));

    fs::create_dir(path("new")).unwrap();
    fs::write(path("new/port_rcv_data"), "2\n").unwrap();
    fs::rename(path("counters"), path("old")).unwrap();
    fs::rename(path("new"), path("counters")).unwrap();
    settle(&path("counters"));
    settle(tmp.path());
    let (text, replaced) = round(&mut held, "counters").unwrap();
    assert_eq!(text, "2");
    assert!(!Arc::ptr_eq(&counters, &replaced));

    assert!(round(&mut held, "hw_counters").is_err_and(|err| err.is_not_found()));
    let settled = fs::metadata(tmp.path()).unwrap().modified().unwrap();
    fs::create_dir(path("hw_counters")).unwrap();
    fs::write(path("hw_counters/port_rcv_data"), "3\n").unwrap();
    settle(&path("hw_counters"));
    fs::File::open(tmp.path())
        .unwrap()
        .set_modified(settled)
        .unwrap();
    assert!(round(&mut held, "hw_counters").is_err_and(|err| err.is_not_found()));
    settle(tmp.path());
    assert_eq!(round(&mut held, "hw_counters").unwrap().0, "3");
}

/// An IOMMU group's directory as `kernel/iommu_groups` holds it, and its members.
fn make_group(groups: &Path, group: &str, members: &[&str]) {
    fs::create_dir_all(groups.join(group).join("devices")).unwrap();
    fs::write(groups.join(group).join("type"), "DMA\n").unwrap();
    for member in members {
        fs::create_dir(groups.join(group).join("devices").join(member)).unwrap();
    }
}

/// Runs `change` in `dir`, then sets `dir`'s time back to what it was.
fn with_time_kept(dir: &Path, change: impl FnOnce()) {
    let time = fs::metadata(dir).unwrap().modified().unwrap();
    change();
    fs::File::open(dir).unwrap().set_modified(time).unwrap();
}

/// One scrape of the groups' directory as the PCI host unit reads it: the group `group`
/// (by its listing's inode number), its members, and its `type` as held.
fn read_group(
    held: &mut HeldAttributes,
    root: &Path,
    group: &str,
    as_on_sysfs: bool,
) -> (Arc<SysDir>, Vec<String>) {
    let groups = SysDir::open(root, "").unwrap();
    let listing = groups.entries_with_inodes().unwrap();
    let (_, inode) = (listing.iter())
        .find(|(entry, _)| entry.name().ok() == Some(group))
        .unwrap();
    if as_on_sysfs {
        held.as_on_sysfs(&groups);
    }
    let dir = held.listed_subdir(&groups, group, *inode).unwrap();
    if as_on_sysfs {
        held.as_on_sysfs(&dir);
        let devices = held.fixed_subdir(&dir, "devices").unwrap();
        held.as_on_sysfs(&devices);
    }
    let mut reader = AttributeReader::default();
    assert_eq!(dir.read_held("type", held, &mut reader).unwrap(), "DMA");
    let members = held.subdir_entries(&dir, "devices").unwrap();
    let members = members.iter().map(|m| m.name().unwrap().to_string());
    let members = members.collect();
    held.end_round();
    (dir, members)
}

/// As on sysfs, a listed subdirectory is kept while the listing shows it with the inode
/// number it had, and another in its place is opened; its entries are listed again each
/// round, so a member added is seen though no time moved; one not asked for in a round is
/// closed.
#[test]
fn as_on_sysfs_a_listed_subdirectory_is_kept_while_its_listing_shows_the_same_node() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    make_group(root, "48", &["0000:3b:00.0"]);
    settle(root);
    let (budget, mut held) = held_within(16);
    let (first, members) = read_group(&mut held, root, "48", true);
    assert_eq!(members, ["0000:3b:00.0"]);
    let (again, _) = read_group(&mut held, root, "48", true);
    // Kept where kernfs does not take node numbers back at once (4.14 and later).
    assert_eq!(Arc::ptr_eq(&first, &again), numbers_not_reused());

    // As kernfs does, with no time moved.
    with_time_kept(&root.join("48/devices"), || {
        fs::create_dir(root.join("48/devices/0000:3b:00.1")).unwrap();
    });
    let (_, members) = read_group(&mut held, root, "48", true);
    assert_eq!(members, ["0000:3b:00.0", "0000:3b:00.1"]);

    with_time_kept(root, || {
        fs::rename(root.join("48"), root.join("old")).unwrap();
        make_group(root, "48", &["0000:5e:00.0"]);
    });
    let (replaced, members) = read_group(&mut held, root, "48", true);
    assert!(!Arc::ptr_eq(&first, &replaced));
    assert_eq!(members, ["0000:5e:00.0"]);

    // A group no longer listed is closed, its shares given back: group 49's directory,
    // its `devices/` and `type` are all that is held.
    with_time_kept(root, || {
        make_group(root, "49", &["0000:af:00.0"]);
        fs::remove_dir_all(root.join("48")).unwrap();
    });
    let (_, members) = read_group(&mut held, root, "49", true);
    assert_eq!(members, ["0000:af:00.0"]);
    // Its `type` and `devices/`, and the group's directory where it is kept.
    assert_eq!(held.len(), 2 + usize::from(numbers_not_reused()));
    held.end_round();
    assert_eq!((held.len(), budget.held()), (0, 0));
}

/// Outside sysfs a listed subdirectory is kept while its parent's look says nothing in it
/// changed, and its entries while its own look says so: a member added, or a group
/// renamed aside and another made in its place, is seen the next round.
#[test]
fn a_listed_subdirectory_and_its_entries_are_kept_while_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    make_group(root, "7", &["0000:3b:00.0"]);
    let settle_all = || {
        for dir in ["7/devices", "7", ""] {
            settle(&root.join(dir));
        }
    };
    settle_all();
    let (_budget, mut held) = held_within(16);
    let (first, members) = read_group(&mut held, root, "7", false);
    assert_eq!(members, ["0000:3b:00.0"]);
    let (again, _) = read_group(&mut held, root, "7", false);
    assert!(Arc::ptr_eq(&first, &again));

    fs::create_dir(root.join("7/devices/0000:3b:00.1")).unwrap();
    let (_, members) = read_group(&mut held, root, "7", false);
    assert_eq!(members, ["0000:3b:00.0", "0000:3b:00.1"]);
    settle_all();
    let (_, members) = read_group(&mut held, root, "7", false);
    assert_eq!(members, ["0000:3b:00.0", "0000:3b:00.1"]);

    fs::rename(root.join("7"), root.join("old")).unwrap();
    make_group(root, "7", &["0000:5e:00.0"]);
    settle_all();
    let (replaced, members) = read_group(&mut held, root, "7", false);
    assert!(!Arc::ptr_eq(&first, &replaced));
    assert_eq!(members, ["0000:5e:00.0"]);
}

/// A held subdirectory a round does not ask for is closed at its end, its shares given
/// back; beyond the budget a listed subdirectory is opened each time and nothing is held.
#[test]
fn a_subdirectory_not_asked_for_or_beyond_the_budget_is_not_held() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    make_group(root, "3", &["0000:3b:00.0"]);
    fs::create_dir(root.join("3/other")).unwrap();
    for dir in ["3/devices", "3/other", "3", ""] {
        settle(&root.join(dir));
    }
    let (budget, mut held) = held_within(16);
    let group = SysDir::open(root, "3").unwrap();
    for name in ["devices", "other"] {
        held.fixed_subdir(&group, name).unwrap();
    }
    held.end_round();
    // Two subdirectories, two shares each.
    assert_eq!((held.len(), budget.held()), (2, 4));
    held.fixed_subdir(&group, "devices").unwrap();
    held.end_round();
    assert_eq!((held.len(), budget.held()), (1, 2));

    let (budget, mut held) = held_within(1);
    for _ in 0..2 {
        let (first, members) = read_group(&mut held, root, "3", false);
        let (again, _) = read_group(&mut held, root, "3", false);
        assert!(!Arc::ptr_eq(&first, &again));
        assert_eq!(members, ["0000:3b:00.0"]);
    }
    // The one share left takes the group's `type`.
    assert_eq!(budget.held(), 1);
    held.end_round();
    assert_eq!(budget.held(), 0);
}

/// A fixed attribute on sysfs is read once per directory: kept, with no descriptor, while
/// the directory stays the same one (rewritten behind its back, it still reads as first
/// read), read again once another directory (a device registered again) is in its place.
/// Outside sysfs it is read as any other, so a fixture rewritten in place is seen.
#[test]
fn a_fixed_attribute_is_read_once_per_directory_on_sysfs() {
    let tmp = tempfile::tempdir().unwrap();
    let path = |name: &str| tmp.path().join(name);
    let make_device = |name: &str, speed: &str| {
        fs::create_dir(path(name)).unwrap();
        fs::write(path(name).join("max_link_speed"), speed).unwrap();
        settle(&path(name));
    };
    make_device("device", "8.0 GT/s PCIe\n");
    let (budget, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    let mut round = |held: &mut HeldAttributes, as_on_sysfs: bool| {
        let dir = SysDir::open(tmp.path(), "device").unwrap();
        let key = dir.relative.as_os_str().as_bytes();
        if let Some(held_dir) = held.held_dir(&dir).filter(|_| as_on_sysfs) {
            held_dir.on_sysfs = true;
        }
        assert!(held.dirs.contains_key(key));
        let text = dir.read_fixed("max_link_speed", held, &mut reader);
        let text = text.map(str::to_string);
        held.end_round();
        text.unwrap()
    };
    // Outside sysfs: held, and read fresh.
    assert_eq!(round(&mut held, false), "8.0 GT/s PCIe");
    assert_eq!((held.len(), budget.held()), (1, 1));
    fs::write(path("device/max_link_speed"), "16.0 GT/s PCIe\n").unwrap();
    assert_eq!(round(&mut held, false), "16.0 GT/s PCIe");

    // As on sysfs: kept, its descriptor closed.
    assert_eq!(round(&mut held, true), "16.0 GT/s PCIe");
    assert_eq!((held.len(), budget.held()), (0, 0));
    fs::write(path("device/max_link_speed"), "2.5 GT/s PCIe\n").unwrap();
    assert_eq!(round(&mut held, true), "16.0 GT/s PCIe");

    // Another directory in its place: read again.
    make_device("new", "32.0 GT/s PCIe\n");
    fs::rename(path("device"), path("old")).unwrap();
    fs::rename(path("new"), path("device")).unwrap();
    assert_eq!(round(&mut held, true), "32.0 GT/s PCIe");
}

/// Beyond the budget attributes are read and closed as unheld ones are; what is not a
/// regular file is never held; a round closes what it did not read.
#[test]
fn held_descriptors_stay_within_their_budget_and_their_round() {
    let (tmp, dir) = dir_with(&[("a", "1\n"), ("b", "2\n")]);
    mkfifo(&tmp.path().join("fifo"));
    let (budget, mut held) = held_within(1);
    let mut reader = AttributeReader::default();
    let err = dir.read_held("fifo", &mut held, &mut reader).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotRegularFile, "{err}");
    assert_eq!(budget.held(), 0);
    for _ in 0..2 {
        assert_eq!(dir.read_held("a", &mut held, &mut reader).unwrap(), "1");
        assert_eq!(dir.read_held("b", &mut held, &mut reader).unwrap(), "2");
        assert_eq!((held.len(), budget.held()), (1, 1));
        held.end_round();
    }
    held.end_round();
    assert_eq!((held.len(), budget.held()), (0, 0));
    assert_eq!(dir.read_held("b", &mut held, &mut reader).unwrap(), "2");
    assert_eq!((held.len(), budget.held()), (1, 1));
    drop(held);
    assert_eq!(budget.held(), 0);
}

/// A round the listing leaves open goes on in the unit's read (what both read stays
/// held); one never gone on with ends before the next, closing what it did not read.
#[test]
fn a_round_left_open_goes_on_in_the_next_read_or_ends_before_the_next_opening() {
    let (_tmp, dir) = dir_with(&[("a", "1\n"), ("b", "2\n")]);
    let units: HeldByUnit = HeldByUnit::default();
    let mut reader = AttributeReader::default();
    // Reads `name` (whose content is `1` for `a`, `2` for `b`): how many are held then.
    let mut read = |name: &str, held: &mut HeldAttributes| {
        let content = if name == "a" { "1" } else { "2" };
        assert_eq!(dir.read_held(name, held, &mut reader).unwrap(), content);
        held.len()
    };
    assert_eq!(
        units.read_opening("u", |held, ()| (read("a", held), true)),
        1
    );
    assert_eq!(units.read("u", |held, ()| read("b", held)), 2);
    // Left open, and never gone on with: "b", not read in it, is closed when it ends.
    assert_eq!(
        units.read_opening("u", |held, ()| (read("a", held), true)),
        2
    );
    assert_eq!(
        units.read_opening("u", |held, ()| (read("a", held), false)),
        1
    );
    // Not left open: that round ended with it, and this one closes "a", not read in it.
    assert_eq!(units.read("u", |held, ()| read("b", held)), 2);
    assert_eq!(units.read("u", |held, ()| read("b", held)), 1);
    // Left open and gone on with: "a", read by the opening, stays when the read ends it.
    assert_eq!(
        units.read_opening("u", |held, ()| (read("a", held), true)),
        2
    );
    assert_eq!(units.read("u", |held, ()| read("b", held)), 2);
    assert_eq!(units.read("u", |held, ()| held.len()), 2);
}

/// On real sysfs a fixed attribute is read once and kept with no descriptor: a PCI
/// device's `subsystem_vendor` reads as the file does, round after round.
#[test]
fn a_fixed_sysfs_attribute_holds_no_descriptor() {
    let Some(device) = fs::read_dir("/sys/bus/pci/devices")
        .ok()
        .and_then(|mut devices| devices.next()?.ok())
    else {
        eprintln!("skipped: this machine's /sys/bus/pci/devices lists no PCI device");
        return;
    };
    let name = device.file_name().into_string().unwrap();
    let sysfs = SysDir::open(Path::new("/sys"), "").unwrap();
    let dir = sysfs.link_dir(&format!("bus/pci/devices/{name}")).unwrap();
    let expected = fs::read_to_string(device.path().join("subsystem_vendor")).unwrap();
    let (budget, mut held) = held_within(8);
    let mut reader = AttributeReader::default();
    for _ in 0..2 {
        let text = dir.read_fixed("subsystem_vendor", &mut held, &mut reader);
        assert_eq!(text.unwrap(), expected.trim());
        assert_eq!((held.len(), budget.held()), (0, 0));
        held.end_round();
    }
}

/// A real sysfs directory listed again through its own descriptor lists what a fresh
/// listing does, round after round.
#[test]
fn a_sysfs_directory_listed_again_from_its_start_lists_it_all() {
    // Every machine has a CPU, and this directory has more entries than CPUs.
    let dir = SysDir::open(Path::new("/sys"), "devices/system/cpu").unwrap();
    let fresh = dir.entries().unwrap();
    assert!(fresh.iter().any(|entry| entry.name().ok() == Some("cpu0")));
    for _ in 0..2 {
        assert_eq!(dir.entries_from_start().unwrap(), fresh);
    }
}

/// A real sysfs attribute held open is read fresh each time: `/sys/kernel/uevent_seqnum`
/// moves when a uevent is sent, as the kernel's `show()` runs again on every pread.
#[test]
fn a_held_sysfs_attribute_is_read_fresh() {
    let Ok(dir) = SysDir::open(Path::new("/sys"), "kernel") else {
        return;
    };
    let mut held = HeldAttributes::default();
    let mut reader = AttributeReader::default();
    let mut seqnum = || -> u64 {
        let text = dir.read_held("uevent_seqnum", &mut held, &mut reader);
        text.unwrap().parse().unwrap()
    };
    let before = seqnum();
    // Writing "change" to a device's uevent sends one; the loopback device is everywhere.
    if fs::write("/sys/class/net/lo/uevent", "change").is_err() {
        return;
    }
    assert!(seqnum() > before);
    assert!(!held.is_empty());
}
