//! A broker with tens of thousands of topics stays in the routes: its registration carries
//! the topic table compressed in the frame's body, not in the header (whose 1 MiB limit
//! 7,000-9,800 topics used to pass, after which the broker fell out of every route).

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
        let rows: Vec<(String, u32, u32, u32)> = (0..TOPICS)
            .map(|i| (name(i), 2, 2, protocol::perm::READ_WRITE))
            .collect();
        let config = o.data_dir.join("config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("topics.json"),
            serde_json::to_string(&rows).unwrap(),
        )
        .unwrap();
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
