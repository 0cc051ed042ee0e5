use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::schedule::STUCK_PER_COLLECTOR;
use super::*;
use crate::collector::{CollectError, Collector, Output};
use crate::metrics::{encode, Desc, Format};
use crate::sync::lock;

const UP: Desc = Desc::gauge("hpcnode_test_up", "Test.", None);

/// Units `good` and `hung`; reading `hung` blocks until the test releases it, like a
/// wedged driver.
struct OneHungDevice {
    release: Mutex<mpsc::Receiver<()>>,
    hung_reads: AtomicU64,
}

impl Collector for OneHungDevice {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok(vec!["good".into(), "hung".into()])
    }

    fn collect_unit(&self, unit: &String, out: &mut Output) {
        if unit == "hung" {
            self.hung_reads.fetch_add(1, Ordering::SeqCst);
            let _ = lock(&self.release).recv();
        }
        out.samples.push(
            &UP,
            vec![("device", unit.to_string().into())],
            Value::Int(1),
        );
    }
}

struct Broken;

impl Collector for Broken {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Err(CollectError::new(ErrorKind::Io, "root unreadable"))
    }

    fn collect_unit(&self, _unit: &String, _out: &mut Output) {}
}

/// A listing that panics, or (`hang`) waits until the test releases it.
struct ListingFails {
    hang: Option<Mutex<mpsc::Receiver<()>>>,
}

impl Collector for ListingFails {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        match &self.hang {
            Some(release) => {
                let _ = lock(release).recv();
                Ok(vec!["a".into()])
            }
            None => panic!("listing bug"),
        }
    }

    fn collect_unit(&self, unit: &String, out: &mut Output) {
        out.samples
            .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
    }
}

/// A listing that hangs past the deadline is this scrape's timeout, and one that panics is a
/// panic: either way the collector fails and nothing of it is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_or_panicking_listing_fails_the_collector() {
    let (release, wait) = mpsc::channel();
    let hangs = ListingFails {
        hang: Some(Mutex::new(wait)),
    };
    let hangs = Scraper::new(
        vec![("hangs", Started::new(hangs))],
        Duration::from_millis(200),
        2,
    );
    // A panic's hook may print a backtrace first: a deadline it cannot reach.
    let panics = ListingFails { hang: None };
    let panics = Scraper::new(
        vec![("panics", Started::new(panics))],
        Duration::from_secs(5),
        2,
    );
    for (scraper, collector, kind) in [(&hangs, "hangs", "timeout"), (&panics, "panics", "panic")] {
        let out = text(scraper.scrape(&Selection::All).await);
        assert!(!out.contains("hpcnode_test_up"), "{out}");
        let success = format!("hpcnode_scrape_collector_success{{collector=\"{collector}\"}} 0");
        assert!(out.contains(&success), "{out}");
        let error = format!(
            "hpcnode_collector_errors_total{{collector=\"{collector}\",kind=\"{kind}\"}} 1"
        );
        assert!(out.contains(&error), "{out}");
    }
    // Released (the hung listing, then the next one), the next scrape lists and reads.
    release.send(()).unwrap();
    release.send(()).unwrap();
    // Until the released listing has left: still there, it is a read still running.
    let busy = hangs.slots[0].busy.clone();
    for _ in 0..500 {
        if lock(&busy).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        lock(&busy).is_empty(),
        "the released listing still runs after 5 s"
    );
    let again = text(hangs.scrape(&Selection::All).await);
    assert!(again.contains("hpcnode_test_up{device=\"a\"} 1"), "{again}");
    assert!(again.contains("hpcnode_scrape_collector_success{collector=\"hangs\"} 1"));
}

/// Unit `a`'s read panics; `b`'s does not.
struct Panics;

impl Collector for Panics {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok(vec!["a".into(), "b".into()])
    }

    fn collect_unit(&self, unit: &String, out: &mut Output) {
        if unit == "a" {
            panic!("bug")
        }
        out.samples
            .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
    }
}

fn text(samples: Samples) -> String {
    encode(samples, Format::PrometheusText).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_unit_hides_only_itself_and_is_not_read_again() {
    let (release, wait) = mpsc::channel();
    let collector = Arc::new(OneHungDevice {
        release: Mutex::new(wait),
        hung_reads: AtomicU64::new(0),
    });
    struct Shared(Arc<OneHungDevice>);
    impl Collector for Shared {
        type Unit = String;

        fn units(&self) -> Result<Vec<String>, CollectError> {
            self.0.units()
        }
        fn collect_unit(&self, unit: &String, out: &mut Output) {
            self.0.collect_unit(unit, out)
        }
    }
    let scraper = Scraper::new(
        vec![("test", Started::new(Shared(collector.clone())))],
        Duration::from_millis(200),
        2,
    );

    let first = text(scraper.scrape(&Selection::All).await);
    assert!(
        first.contains("hpcnode_test_up{device=\"good\"} 1"),
        "{first}"
    );
    assert!(first.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));
    assert!(first.contains("hpcnode_collector_errors_total{collector=\"test\",kind=\"timeout\"} 1"));

    for _ in 0..5 {
        let again = text(scraper.scrape(&Selection::All).await);
        assert!(
            again.contains("hpcnode_test_up{device=\"good\"} 1"),
            "{again}"
        );
        assert!(!again.contains("device=\"hung\""));
        assert!(again.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));
    }
    assert_eq!(
        collector.hung_reads.load(Ordering::SeqCst),
        1,
        "a hung unit was read again"
    );
    let counted = text(scraper.scrape(&Selection::All).await);
    assert!(counted
        .contains("hpcnode_collector_errors_total{collector=\"test\",kind=\"still_running\"} 6"));

    release.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock(&scraper.slots[0].busy).contains_key("hung") {
        assert!(Instant::now() < deadline, "released read never finished");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    release.send(()).unwrap();
    let recovered = text(scraper.scrape(&Selection::All).await);
    assert!(recovered.contains("hpcnode_test_up{device=\"hung\"} 1"));
    assert!(recovered.contains("hpcnode_scrape_collector_success{collector=\"test\"} 1"));
    assert_eq!(collector.hung_reads.load(Ordering::SeqCst), 2);
}

/// Units `hung` then `after`; counts the reads of `after`.
struct HungThenAfter {
    release: Mutex<mpsc::Receiver<()>>,
    after_reads: AtomicU64,
}

impl Collector for Arc<HungThenAfter> {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok(vec!["hung".into(), "after".into()])
    }

    fn collect_unit(&self, unit: &String, _out: &mut Output) {
        if unit == "hung" {
            let _ = lock(&self.release).recv();
        } else {
            self.after_reads.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A scraper of one worker over [`HungThenAfter`], whose worker stuck for `stalled_after`
/// is replaced; and what releases the hung read.
fn hung_then_after(
    deadline: Duration,
    stalled_after: Duration,
) -> (mpsc::Sender<()>, Arc<HungThenAfter>, Scraper) {
    let (release, wait) = mpsc::channel();
    let collector = Arc::new(HungThenAfter {
        release: Mutex::new(wait),
        after_reads: AtomicU64::new(0),
    });
    let mut scraper = Scraper::new(vec![("test", Started::new(collector.clone()))], deadline, 1);
    scraper.stalled_after = stalled_after;
    (release, collector, scraper)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_freed_after_the_deadline_reads_no_further_unit() {
    // No helper: `after` is left for the worker stuck on `hung`.
    let (release, collector, scraper) =
        hung_then_after(Duration::from_millis(100), Duration::from_secs(3600));
    let first = text(scraper.scrape(&Selection::All).await);
    assert!(first.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));

    release.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock(&scraper.slots[0].busy).contains_key("hung") {
        assert!(Instant::now() < deadline, "released read never finished");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        collector.after_reads.load(Ordering::SeqCst),
        0,
        "a worker of a finished scrape read on"
    );
}

/// With its one worker stuck on a hung unit, the crew is sent another, which reads the
/// unit after it within the scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crew_with_every_worker_stuck_is_sent_another() {
    let (release, collector, scraper) =
        hung_then_after(Duration::from_millis(500), Duration::from_millis(20));
    let first = text(scraper.scrape(&Selection::All).await);
    assert_eq!(collector.after_reads.load(Ordering::SeqCst), 1, "{first}");
    assert!(first.contains("hpcnode_scrape_collector_success{collector=\"test\"} 0"));
    let timeout = "hpcnode_collector_errors_total{collector=\"test\",kind=\"timeout\"} 1";
    assert!(first.contains(timeout), "{first}");
    release.send(()).unwrap();
}

/// Twenty units whose every read hangs until the test releases them all (a wedged driver).
#[derive(Default)]
struct Wedged {
    released: Mutex<bool>,
    release: std::sync::Condvar,
    reads: AtomicU64,
}

impl Collector for Arc<Wedged> {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok((0..20).map(|unit| format!("w{unit}")).collect())
    }

    fn collect_unit(&self, _unit: &String, _out: &mut Output) {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let released = lock(&self.released);
        let _released = self.release.wait_while(released, |released| !*released);
    }
}

/// Fifty units, read at once.
struct Healthy;

impl Collector for Healthy {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok((0..50).map(|unit| format!("h{unit}")).collect())
    }

    fn collect_unit(&self, unit: &String, out: &mut Output) {
        out.samples
            .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
    }
}

/// A collector whose every read hangs holds two threads, and the scrape's one worker is
/// replaced: the other collector is read whole, with success 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_whose_every_read_hangs_holds_two_threads_not_the_scrape() {
    let wedged = Arc::new(Wedged::default());
    let scraper = Scraper::new(
        vec![
            ("wedged", Started::new(wedged.clone())),
            ("healthy", Started::new(Healthy)),
        ],
        Duration::from_secs(1),
        1,
    );
    let out = text(scraper.scrape(&Selection::All).await);
    *lock(&wedged.released) = true;
    wedged.release.notify_all();
    let healthy = out
        .lines()
        .filter(|l| l.starts_with("hpcnode_test_up{"))
        .count();
    assert_eq!(healthy, 50, "{out}");
    assert!(out.contains("hpcnode_scrape_collector_success{collector=\"healthy\"} 1"));
    assert!(out.contains("hpcnode_scrape_collector_success{collector=\"wedged\"} 0"));
    let reads = wedged.reads.load(Ordering::SeqCst);
    assert_eq!(
        reads, STUCK_PER_COLLECTOR as u64,
        "threads stuck in the wedged collector"
    );
}

/// One unit whose read takes a while (slow, not hung).
struct Slow;

impl Collector for Slow {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok(vec!["slow".into()])
    }

    fn collect_unit(&self, unit: &String, out: &mut Output) {
        std::thread::sleep(Duration::from_millis(150));
        out.samples.push(
            &UP,
            vec![("device", unit.to_string().into())],
            Value::Int(1),
        );
    }
}

/// Two Prometheus servers scraping at once: a unit that one scrape is reading within its
/// deadline is not hung, so the other waits for it and reads it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scrapes_both_read_a_slow_unit() {
    let scraper = Scraper::new(
        vec![("test", Started::new(Slow))],
        Duration::from_secs(2),
        2,
    );
    let (first, second) = tokio::join!(
        scraper.scrape(&Selection::All),
        scraper.scrape(&Selection::All)
    );
    for out in [text(first), text(second)] {
        assert!(out.contains("hpcnode_test_up{device=\"slow\"} 1"), "{out}");
        assert!(
            out.contains("hpcnode_scrape_collector_success{collector=\"test\"} 1"),
            "{out}"
        );
    }
}

/// Far more quick units than one scrape's deadline allows.
struct ManyUnits;

const MANY_UNITS: usize = 20_000;

impl Collector for ManyUnits {
    type Unit = usize;

    fn units(&self) -> Result<Vec<usize>, CollectError> {
        Ok((0..MANY_UNITS).collect())
    }

    fn collect_unit(&self, unit: &usize, out: &mut Output) {
        std::thread::sleep(Duration::from_micros(100));
        out.samples.push(
            &UP,
            vec![("device", unit.to_string().into())],
            Value::Int(1),
        );
    }
}

fn value_of(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in {text}"))
        .parse()
        .unwrap()
}

/// Workers stop at the deadline between two units as well as in the middle of one: either
/// way the units left make the scrape one timeout with success 0. Whatever the machine's
/// speed, a scrape is complete with success 1, or flagged; never partial with success 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_left_at_the_deadline_are_one_timeout_and_success_0() {
    let scraper = Scraper::new(
        vec![("test", Started::new(ManyUnits))],
        Duration::from_millis(20),
        2,
    );
    let mut counted = 0;
    for _ in 0..10 {
        let text = text(scraper.scrape(&Selection::All).await);
        let read = text
            .lines()
            .filter(|l| l.starts_with("hpcnode_test_up{"))
            .count();
        let success = value_of(
            &text,
            "hpcnode_scrape_collector_success{collector=\"test\"}",
        );
        let now = value_of(
            &text,
            "hpcnode_collector_errors_total{collector=\"test\",kind=\"timeout\"}",
        );
        if read < MANY_UNITS {
            assert_eq!(success, 0, "{read} of {MANY_UNITS} units with success 1");
            assert_eq!(now, counted + 1, "one timeout per cut-short scrape");
        } else {
            // All read: success 1, or 0 with a timeout when a worker was still returning
            // from its last unit at the deadline.
            assert_eq!(now, counted + 1 - success);
        }
        counted = now;
    }
}

/// One unit, read at once.
struct Quick;

impl Collector for Quick {
    type Unit = String;

    fn units(&self) -> Result<Vec<String>, CollectError> {
        Ok(vec!["quick".into()])
    }

    fn collect_unit(&self, unit: &String, out: &mut Output) {
        out.samples
            .push(&UP, vec![("device", unit.clone().into())], Value::Int(1));
    }
}

/// A collector with more slow units than the deadline allows delays the collector after
/// it, which the crew's worker reaches in turn: it finishes, with success 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_of_many_units_does_not_starve_the_next() {
    let scraper = Scraper::new(
        vec![
            ("many", Started::new(ManyUnits)),
            ("quick", Started::new(Quick)),
        ],
        Duration::from_secs(1),
        // One worker, which lists both before it reads either.
        1,
    );
    let out = text(scraper.scrape(&Selection::All).await);
    assert!(out.contains("hpcnode_test_up{device=\"quick\"} 1"), "{out}");
    assert!(out.contains("hpcnode_scrape_collector_success{collector=\"quick\"} 1"));
    assert!(out.contains("hpcnode_scrape_collector_success{collector=\"many\"} 0"));
}

#[tokio::test]
async fn failure_and_panic_are_reported_not_propagated() {
    let scraper = Scraper::new(
        vec![
            ("broken", Started::new(Broken)),
            ("panics", Started::new(Panics)),
        ],
        Duration::from_secs(5),
        // One worker: the unit after the one that panicked is read by the same worker.
        1,
    );
    let out = text(scraper.scrape(&Selection::All).await);
    assert!(out.contains("hpcnode_test_up{device=\"b\"} 1"), "{out}");
    assert!(out.contains("hpcnode_scrape_collector_success{collector=\"broken\"} 0"));
    assert!(out.contains("hpcnode_collector_errors_total{collector=\"broken\",kind=\"io\"} 1"));
    assert!(out.contains("hpcnode_scrape_collector_success{collector=\"panics\"} 0"));
    assert!(out.contains("hpcnode_collector_errors_total{collector=\"panics\",kind=\"panic\"} 1"));
    // The panicking read released its unit: the next scrape reads it (and panics) again.
    let again = text(scraper.scrape(&Selection::All).await);
    assert!(again.contains("hpcnode_collector_errors_total{collector=\"panics\",kind=\"panic\"} 2"));
}
