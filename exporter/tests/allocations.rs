//! What a scrape allocates: the rdma collector's series keep their labels (device, port,
//! counter name), encoded once, from one scrape to the next, so a series more costs no
//! allocation.
//! Counted by a global allocator of this test binary alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use hpcnode_exporter::collectors;
use hpcnode_exporter::config::{self, Invocation};
use hpcnode_exporter::metrics::{encode, Format};
use hpcnode_exporter::scrape::{Scraper, Selection};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator with the caller's arguments; only a
// counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `GlobalAlloc::alloc`, unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through `alloc` or `realloc` above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System`; the caller's contract, unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// A sysfs root with one mlx5 port of `counters` `hw_counters` files, its directories dated a
/// minute back (a tree that just changed is listed again each scrape).
fn port_with_hw_counters(root: &Path, counters: usize) {
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(port.join("hw_counters")).unwrap();
    for (file, content) in [
        ("state", "4: ACTIVE\n"),
        ("phys_state", "5: LinkUp\n"),
        ("rate", "200 Gb/sec (4X HDR)\n"),
        ("link_layer", "InfiniBand\n"),
    ] {
        std::fs::write(port.join(file), content).unwrap();
    }
    for i in 0..counters {
        let file = port.join(format!("hw_counters/rx_write_requests_{i}"));
        std::fs::write(file, format!("{}\n", 1000 + i)).unwrap();
    }
    let past = SystemTime::now() - Duration::from_secs(60);
    for dir in [&port, &port.join("hw_counters")] {
        std::fs::File::open(dir)
            .unwrap()
            .set_modified(past)
            .unwrap();
    }
}

/// The rdma series of the second scrape of `root`, and the allocations it made.
fn second_scrape(root: &Path) -> (usize, usize) {
    let sysfs = format!("--path.sysfs={}", root.display());
    let argv = [
        "hpcnode_exporter",
        "--collector.disable-defaults",
        "--collector.rdma",
        &sysfs,
    ];
    let Ok(Invocation::Run(config)) = config::parse(argv, &collectors::ALL) else {
        panic!("not a run");
    };
    let started = (config.collection.collectors.into_iter())
        .map(|enabled| {
            let name = enabled.registration.name;
            (
                name,
                enabled.settings.start(&config.collection.host).unwrap(),
            )
        })
        .collect();
    let scraper = Scraper::new(
        started,
        config.collection.host.scrape_timeout,
        config.collection.scrape_workers,
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The first scrape opens and holds the files and makes the label values.
    drop(runtime.block_on(scraper.scrape(&Selection::All)));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let samples = runtime.block_on(scraper.scrape(&Selection::All));
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    scraper.stop();
    let text = encode(samples, Format::PrometheusText).unwrap();
    let series = (text.lines())
        .filter(|line| line.starts_with("hpcnode_rdma_port_hw_stat_total{"))
        .count();
    (series, allocations)
}

#[test]
fn a_counter_more_costs_a_scrape_no_allocation() {
    let (few, many) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    port_with_hw_counters(few.path(), 8);
    port_with_hw_counters(many.path(), 264);
    let (few_series, few_allocations) = second_scrape(few.path());
    let (many_series, many_allocations) = second_scrape(many.path());
    assert_eq!((few_series, many_series), (8, 264));
    // A label list per series, or a counter name made per series, is an allocation per series
    // or more; what is left grows with the log of the series (lists that double).
    let more = many_allocations.saturating_sub(few_allocations);
    assert!(
        more * 8 < many_series - few_series,
        "{more} more allocations for 256 more series ({few_allocations} for 8)"
    );
}
