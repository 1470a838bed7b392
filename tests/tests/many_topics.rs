//! A broker with tens of thousands of topics stays in the routes: its registration carries
//! the topic table compressed in the frame's body, not in the header (whose 1 MiB limit
//! 7,000-9,800 topics used to pass, after which the broker fell out of every route).

// Tests may unwrap: a panic there is a test failure.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use client::{Admin, Message};
use integration::{producer, wait_for, Cluster};

const TOPICS: usize = 50_000;

/// Names long enough that the list of them (1.8 MB) fits in no frame header (1 MiB).
fn name(i: usize) -> String {
    format!("Many-orders-in-region-eu-{i:05}")
}

#[test]
fn fifty_thousand_topics_are_all_routed_and_served() {
    let c = Cluster::start_with(1, "small", |o| {
        // The table a broker that created them all would have written.
        integration::write_topic_table(&o.data_dir, (0..TOPICS).map(|i| (name(i), 2)));
    });
    let ns = c.namesrv.addr.clone();
    let admin = Admin::new(&ns).unwrap();
    for t in [name(0), name(TOPICS / 2), name(TOPICS - 1)] {
        let route = wait_for(Duration::from_secs(60), || admin.topic_route(&t).ok());
        let route = route.unwrap_or_else(|| panic!("{t} never appeared in the routes"));
        assert_eq!(route.write_queues().len(), 2, "{t}");
    }
    // The whole list, as `mqadmin topic-list` asks for it: in the answer's body.
    let listed = admin.topic_list().unwrap();
    assert!(listed.len() >= TOPICS, "{} topics listed", listed.len());
    let p = producer(&ns);
    p.send(Message::new(name(TOPICS - 1).as_str(), b"last".to_vec()))
        .unwrap();
    let log = c.broker.stderr();
    assert!(!log.contains("cannot register"), "{log}");
}

/// Creating a topic on a broker with 50,000 appends one row to the topic journal instead of
/// rewriting and fsyncing the whole table (3.5-11 ms per creation, growing with the table),
/// and every creation survives a kill -9.
#[test]
fn a_creation_among_fifty_thousand_topics_appends_one_row_and_survives_kill_9() {
    let mut c = Cluster::start_with(1, "small", |o| {
        integration::write_topic_table(&o.data_dir, (0..TOPICS).map(|i| (name(i), 1)));
    });
    let ns = c.namesrv.addr.clone();
    let config = c.opts.data_dir.join("config");
    let table_before = std::fs::read(config.join("topics.json")).unwrap();
    let created: Vec<String> = (0..20).map(|i| format!("Fresh-{i}")).collect();
    for t in &created {
        integration::create_topic(&ns, t, 3);
    }
    assert_eq!(
        std::fs::read(config.join("topics.json")).unwrap(),
        table_before,
        "the table was rewritten by a creation"
    );
    let journal = std::fs::read_to_string(config.join("topics.log")).unwrap();
    assert_eq!(journal.lines().count(), created.len(), "{journal}");
    // Each creation told the NameServer only about its topic; the others stay routed.
    let admin = Admin::new(&ns).unwrap();
    let routed = |t: &String| {
        let want = if t.starts_with("Fresh") { 3 } else { 1 };
        wait_for(Duration::from_secs(30), || {
            admin
                .topic_route(t)
                .ok()
                .filter(|r| r.write_queues().len() == want)
        })
        .is_some()
    };
    for t in created.iter().chain([&name(7), &name(TOPICS - 1)]) {
        assert!(routed(t), "{t} is not routed after the creations");
    }
    assert!(admin.topic_list().unwrap().len() >= TOPICS + created.len());

    c.restart_broker();
    for t in created.iter().chain([&name(7)]) {
        assert!(routed(t), "{t} is not routed after kill -9 and restart");
    }
}
