use super::*;
use crate::ledger::{test_records, Entry};
use chrono::TimeZone;

fn at(h: u32, m: u32) -> (DateTime<Utc>, NaiveTime) {
    let t = Utc.with_ymd_and_hms(2026, 1, 1, h, m, 0).unwrap();
    (t, t.time())
}

fn breaker(name: &str) -> Entry {
    Entry::new(Kind::Breaker, "watch", "gpt")
        .step(Some(500))
        .field("breaker", name)
        .field("evidence", "3 relaunches each ended within 60 s")
}

fn disk_fail() -> Entry {
    Entry::new(Kind::Hygiene, "watch", "gpt")
        .field("check", "disk")
        .field("status", "fail")
        .field("reason", "full in 1.5 h")
}

#[test]
fn defaults_page_on_breakers_critical_xids_and_disk_fail_and_digest_the_rest() {
    let recs = test_records(vec![
        breaker("crash_loop"),
        Entry::new(Kind::Watch, "watch", "gpt")
            .field("event", "xid")
            .field("xid", 79)
            .field("class", "critical"),
        Entry::new(Kind::Watch, "watch", "gpt")
            .field("event", "xid")
            .field("xid", 13)
            .field("class", "application"),
        disk_fail(),
        Entry::new(Kind::Kill, "watch", "gpt").field("reason", "wedge"),
        Entry::new(Kind::Relaunch, "watch", "gpt"),
        Entry::new(Kind::Verdict, "critic", "gpt").field("status", "pass"),
        Entry::new(Kind::Note, "x", "gpt"),
    ]);
    let levels: Vec<Option<Level>> = recs.iter().map(|r| classify(r).map(|c| c.1)).collect();
    use Level::*;
    assert_eq!(
        levels,
        vec![
            Some(Page),
            Some(Page),
            Some(Digest),
            Some(Page),
            Some(Digest),
            Some(Digest),
            None,
            None
        ]
    );
    let (ev, _) = classify(&recs[0]).unwrap();
    assert_eq!(
        (ev.kind.as_str(), ev.cause.as_str()),
        ("breaker", "crash_loop")
    );
    assert!(ev.stops_run);
    assert!(
        ev.text.contains("3 relaunches each ended within 60 s") && ev.text.contains("step 500"),
        "{}",
        ev.text
    );
    assert_eq!(ev.hash, recs[0].hash);
}

#[test]
fn the_same_incident_ten_times_pages_once_then_says_it_flaps() {
    let recs = test_records((0..10).map(|_| disk_fail()).collect());
    let mut r = Router::new(Policy::default());
    let mut pages = 0;
    for (i, rec) in recs.iter().enumerate() {
        let (now, local) = at(12, i as u32);
        match r.decide(rec, now, local).unwrap() {
            Decision::Page { .. } => pages += 1,
            Decision::Suppressed { why, .. } => assert!(why.contains("cooldown 3600 s"), "{why}"),
            d => panic!("{d:?}"),
        }
    }
    assert_eq!(pages, 1);
    // After the cooldown the next one pages again and carries the count of repeats.
    let (now, local) = at(13, 30);
    match r.decide(&recs[0], now, local).unwrap() {
        Decision::Page { repeats, .. } => assert_eq!(repeats, 9),
        d => panic!("{d:?}"),
    }
    // Another cause is its own incident.
    let other = test_records(vec![breaker("crash_loop")]);
    assert!(matches!(
        r.decide(&other[0], now, local),
        Some(Decision::Page { repeats: 0, .. })
    ));
}

#[test]
fn quiet_hours_turn_pages_into_digest_items_except_a_stopped_run() {
    let policy = Policy {
        quiet: Some(Quiet {
            from: NaiveTime::from_hms_opt(22, 0, 0).unwrap(),
            to: NaiveTime::from_hms_opt(7, 0, 0).unwrap(),
        }),
        ..Policy::default()
    };
    let recs = test_records(vec![disk_fail(), breaker("no_progress")]);
    let mut r = Router::new(policy);
    let (night, night_local) = at(3, 0);
    match r.decide(&recs[0], night, night_local).unwrap() {
        Decision::Digest { why, .. } => assert_eq!(why, "quiet hours 22:00-07:00"),
        d => panic!("{d:?}"),
    }
    assert!(matches!(
        r.decide(&recs[1], night, night_local),
        Some(Decision::Page { .. })
    ));
    // The quiet-hours digest item did not start a cooldown: at 07:00 it pages.
    let (morning, morning_local) = at(7, 0);
    assert!(matches!(
        r.decide(&recs[0], morning, morning_local),
        Some(Decision::Page { .. })
    ));
    // Quiet hours that do not wrap midnight.
    let q = Quiet {
        from: NaiveTime::from_hms_opt(12, 0, 0).unwrap(),
        to: NaiveTime::from_hms_opt(13, 0, 0).unwrap(),
    };
    assert!(q.contains(NaiveTime::from_hms_opt(12, 30, 0).unwrap()));
    assert!(!q.contains(NaiveTime::from_hms_opt(13, 0, 0).unwrap()));
}

#[test]
fn the_user_mapping_overrides_by_kind_or_kind_and_cause() {
    let mut overrides = BTreeMap::new();
    overrides.insert("kill".to_string(), Level::Page);
    overrides.insert("kill:zombie".to_string(), Level::Ignore);
    let recs = test_records(vec![
        Entry::new(Kind::Kill, "watch", "gpt").field("reason", "wedge"),
        Entry::new(Kind::Kill, "watch", "gpt").field("reason", "zombie"),
    ]);
    let mut r = Router::new(Policy {
        overrides,
        ..Policy::default()
    });
    let (now, local) = at(12, 0);
    assert!(matches!(
        r.decide(&recs[0], now, local),
        Some(Decision::Page { .. })
    ));
    assert_eq!(r.decide(&recs[1], now, local), None);
}

#[test]
fn the_digest_is_due_once_a_day_after_its_time() {
    let d = |day: u32, h: u32, m: u32| {
        chrono::NaiveDate::from_ymd_opt(2026, 1, day)
            .unwrap()
            .and_hms_opt(h, m, 0)
            .unwrap()
    };
    let eight = NaiveTime::from_hms_opt(8, 0, 0).unwrap();
    assert!(!digest_due(None, d(1, 7, 59), eight));
    assert!(digest_due(None, d(1, 8, 0), eight));
    assert!(!digest_due(Some(d(1, 8, 0)), d(1, 23, 0), eight));
    assert!(!digest_due(Some(d(1, 8, 0)), d(2, 7, 59), eight));
    assert!(digest_due(Some(d(1, 8, 0)), d(2, 8, 1), eight));
    // roger was down at 08:00 yesterday and today: one digest when it is back, not two.
    assert!(digest_due(Some(d(1, 8, 0)), d(3, 6, 0), eight));
    assert!(!digest_due(Some(d(3, 6, 0)), d(3, 7, 0), eight));
}
