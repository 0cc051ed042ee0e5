use super::*;

fn users() -> BTreeMap<String, String> {
    // Cost 4: the tests are about order and bounds, not bcrypt's cost.
    BTreeMap::from([("prometheus".to_string(), bcrypt::hash("right", 4).unwrap())])
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

fn address(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn wrong_verdicts_never_evict_a_right_one() {
    let mut verdicts = Verdicts {
        right: Lru::new(MAX_RIGHT_VERDICTS),
        wrong: Lru::new(MAX_WRONG_VERDICTS),
    };
    verdicts.insert([1; 32], true);
    for n in 0..(4 * MAX_WRONG_VERDICTS as u32) {
        let mut key = [0; 32];
        key[..4].copy_from_slice(&n.to_le_bytes());
        key[31] = 2;
        verdicts.insert(key, false);
    }
    assert_eq!(verdicts.get(&[1; 32]), Some(true));
    assert_eq!(verdicts.wrong.recent_last.len(), MAX_WRONG_VERDICTS);
}

#[test]
fn the_least_recently_used_verdict_goes_first() {
    let mut lru = Lru::new(2);
    lru.insert([1; 32]);
    lru.insert([2; 32]);
    assert!(lru.touch(&[1; 32]));
    lru.insert([3; 32]);
    assert!(lru.touch(&[1; 32]) && lru.touch(&[3; 32]) && !lru.touch(&[2; 32]));
}

#[tokio::test]
async fn a_source_gets_one_check_at_a_time_and_backs_off_after_wrong_passwords_in_a_row() {
    let authenticator = Arc::new(Authenticator::default());
    let users = users();
    let attacker = address("192.0.2.7");
    let (guess1, guess2) = (basic("prometheus", "guess1"), basic("prometheus", "guess2"));
    let (first, second) = tokio::join!(
        authenticator.check(&users, attacker, &guess1),
        authenticator.check(&users, attacker, &guess2),
    );
    assert_eq!((first, second), (Verdict::Wrong, Verdict::Throttled));
    // A person mistyping is not throttled; a client guessing is.
    for guess in 2..=FREE_FAILURES {
        let guess = basic("prometheus", &format!("guess{guess}"));
        assert_eq!(
            authenticator.check(&users, attacker, &guess).await,
            Verdict::Wrong
        );
    }
    // In its backoff: refused without a check, even with the right password...
    let right = basic("prometheus", "right");
    assert_eq!(
        authenticator.check(&users, attacker, &right).await,
        Verdict::Throttled
    );
    // ...which another source is let in with, and then from the cache at any time.
    let scraper = address("192.0.2.8");
    assert_eq!(
        authenticator.check(&users, scraper, &right).await,
        Verdict::Accepted
    );
    assert_eq!(
        authenticator.check(&users, attacker, &right).await,
        Verdict::Accepted
    );
    assert_eq!(
        authenticator.check(&users, attacker, "Bearer x").await,
        Verdict::Missing
    );
}

#[test]
fn an_ipv6_host_is_its_slash_64() {
    assert_eq!(
        Source::of(address("2001:db8:1:2::1")),
        Source::of(address("2001:db8:1:2:ffff::9"))
    );
    assert_ne!(
        Source::of(address("2001:db8:1:2::1")),
        Source::of(address("2001:db8:1:3::1"))
    );
    assert_eq!(
        Source::of(address("::ffff:192.0.2.1")),
        Source::of(address("192.0.2.1"))
    );
}

#[tokio::test]
async fn a_trusted_source_waits_for_at_most_the_check_running() {
    let gate = Arc::new(Gate::default());
    let order = Arc::new(Mutex::new(Vec::new()));
    let running = gate.acquire(Lane::Failed).await;
    let mut waiters = Vec::new();
    for (name, lane) in [
        ("failed 1", Lane::Failed),
        ("unknown", Lane::Unknown),
        ("failed 2", Lane::Failed),
        ("trusted", Lane::Trusted),
    ] {
        let (gate, order) = (gate.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let _permit = gate.acquire(lane).await;
            lock(&order).push(name);
        }));
        // Each is queued before the next.
        tokio::task::yield_now().await;
    }
    drop(running);
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(
        *lock(&order),
        ["trusted", "unknown", "failed 1", "failed 2"]
    );
}

#[tokio::test]
async fn a_waiter_that_goes_away_passes_the_permit_on() {
    let gate = Arc::new(Gate::default());
    let running = gate.acquire(Lane::Trusted).await;
    let gone = {
        let gate = gate.clone();
        tokio::spawn(async move {
            let _permit = gate.acquire(Lane::Trusted).await;
        })
    };
    tokio::task::yield_now().await;
    gone.abort();
    let _ = gone.await;
    drop(running);
    tokio::time::timeout(Duration::from_secs(5), gate.acquire(Lane::Failed))
        .await
        .expect("the permit was lost with the waiter that went away");
}
