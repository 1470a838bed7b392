//! Disk water levels: with the refuse threshold set below the disk's real use, sends are
//! refused with a "disk full" error that names the ratio and the threshold, logged once;
//! with the threshold raised again the broker accepts them.

use client::{ClientError, Message, Producer};
use integration::{mqadmin, producer, Cluster};
use protocol::ResponseCode;

#[test]
fn sends_are_refused_above_the_refuse_ratio_and_accepted_again_below_it() {
    // Any real disk is more than 1% used, so 0.01 makes this disk "full".
    let low = "disk_clean_ratio = 0.01\ndisk_force_clean_ratio = 0.01\ndisk_refuse_ratio = 0.01\ndisk_check_interval_ms = 200\n";
    let mut c = Cluster::start_with(1, "small", |o| o.config_toml = Some(low.to_owned()));
    let ns = c.namesrv.addr.clone();
    assert!(mqadmin(&ns, &["update-topic", "-t", "Full", "-q", "1"])
        .status
        .success());
    let p = Producer::builder()
        .namesrv(&ns)
        .group("g")
        .retries(0)
        .build()
        .unwrap();
    for _ in 0..3 {
        let err = p.send(Message::new("Full", &b"x"[..])).unwrap_err();
        match &err {
            ClientError::Broker { code, remark, .. } => {
                assert_eq!(*code, ResponseCode::DiskFull);
                assert!(remark.contains("disk full"), "{remark}");
                assert!(remark.contains("0.010"), "names the threshold: {remark}");
            }
            other => panic!("expected disk full, got {other:?}"),
        }
    }
    // Logged once per change of level, not once per refused send.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let log = c.broker.stderr();
    assert_eq!(
        log.matches("refusing sends until space returns").count(),
        1,
        "{log}"
    );

    // Raise the thresholds back: the same data directory accepts sends.
    assert_eq!(c.broker.terminate(), Some(0));
    c.opts.config_toml = Some("disk_check_interval_ms = 200\n".to_owned());
    c.restart_broker();
    producer(&ns)
        .send(Message::new("Full", &b"accepted"[..]))
        .unwrap();
}
