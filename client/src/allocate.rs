//! Queue allocation strategies of a clustering consumer group, as RocketMQ's: every member
//! runs the same pure function over the same sorted queue and member lists, so the members
//! agree on who consumes which queue without talking to each other.

use std::fmt::Debug;

use crate::model::MessageQueue;

/// Picks the queues of `current` among `members`. `queues` and `members` are sorted and
/// identical on every member; the result must be too, or queues are consumed twice or not
/// at all (the broker's leases still prevent two members consuming one queue at once).
pub trait AllocateStrategy: Send + Sync + Debug {
    fn name(&self) -> &str;
    fn allocate(
        &self,
        group: &str,
        current: &str,
        queues: &[MessageQueue],
        members: &[String],
    ) -> Vec<MessageQueue>;
}

/// Contiguous blocks of `queues / members` queues, the first `queues % members` members one
/// more (RocketMQ's AllocateMessageQueueAveragely; the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Averagely;

impl AllocateStrategy for Averagely {
    fn name(&self) -> &str {
        "AVG"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &str,
        queues: &[MessageQueue],
        members: &[String],
    ) -> Vec<MessageQueue> {
        let Some(index) = members.iter().position(|m| m == current) else {
            return Vec::new();
        };
        protocol::allocate::averagely(index, queues.len(), members.len())
            .map(|i| queues[i].clone())
            .collect()
    }
}

/// Queue i goes to member i mod members (RocketMQ's AllocateMessageQueueAveragelyByCircle).
#[derive(Debug, Clone, Copy, Default)]
pub struct AveragelyByCircle;

impl AllocateStrategy for AveragelyByCircle {
    fn name(&self) -> &str {
        "AVG_BY_CIRCLE"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &str,
        queues: &[MessageQueue],
        members: &[String],
    ) -> Vec<MessageQueue> {
        let Some(index) = members.iter().position(|m| m == current) else {
            return Vec::new();
        };
        protocol::allocate::by_circle(index, queues.len(), members.len())
            .map(|i| queues[i].clone())
            .collect()
    }
}

/// A fixed list configured per member (RocketMQ's AllocateMessageQueueByConfig); queues the
/// route does not have are left out.
#[derive(Debug, Clone, Default)]
pub struct ByConfig {
    pub queues: Vec<MessageQueue>,
}

impl AllocateStrategy for ByConfig {
    fn name(&self) -> &str {
        "CONFIG"
    }

    fn allocate(
        &self,
        _group: &str,
        _current: &str,
        queues: &[MessageQueue],
        _members: &[String],
    ) -> Vec<MessageQueue> {
        queues
            .iter()
            .filter(|q| self.queues.contains(q))
            .cloned()
            .collect()
    }
}

/// A hash ring with `virtual_nodes` points per member; a queue goes to the first member
/// point at or after its hash (RocketMQ's AllocateMessageQueueConsistentHash): a member
/// joining or leaving moves only the queues next to its points.
#[derive(Debug, Clone, Copy)]
pub struct ConsistentHash {
    pub virtual_nodes: u32,
}

impl Default for ConsistentHash {
    fn default() -> Self {
        ConsistentHash { virtual_nodes: 10 }
    }
}

/// FNV-1a 64 with a final avalanche (splitmix64), stable across runs and platforms.
fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl AllocateStrategy for ConsistentHash {
    fn name(&self) -> &str {
        "CONSISTENT_HASH"
    }

    fn allocate(
        &self,
        _group: &str,
        current: &str,
        queues: &[MessageQueue],
        members: &[String],
    ) -> Vec<MessageQueue> {
        if !members.iter().any(|m| m == current) {
            return Vec::new();
        }
        let mut ring: Vec<(u64, &str)> = members
            .iter()
            .flat_map(|m| {
                (0..self.virtual_nodes.max(1))
                    .map(move |i| (stable_hash(&format!("{m}-{i}")), m.as_str()))
            })
            .collect();
        ring.sort_unstable();
        queues
            .iter()
            .filter(|q| {
                let h = stable_hash(&q.to_string());
                let owner = ring
                    .iter()
                    .find(|(p, _)| *p >= h)
                    .or_else(|| ring.first())
                    .map(|(_, m)| *m);
                owner == Some(current)
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn queues(n: u32) -> Vec<MessageQueue> {
        (0..n)
            .map(|queue_id| MessageQueue {
                topic: "T".into(),
                broker_name: "b".into(),
                queue_id,
            })
            .collect()
    }

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    /// Every queue goes to exactly one member.
    fn check_partition(s: &dyn AllocateStrategy, nq: u32, nm: usize) -> Vec<Vec<u32>> {
        let qs = queues(nq);
        let ms = members(nm);
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for m in &ms {
            let mine: Vec<u32> = s
                .allocate("g", m, &qs, &ms)
                .iter()
                .map(|q| q.queue_id)
                .collect();
            for q in &mine {
                assert!(seen.insert(*q), "{}: queue {q} given twice", s.name());
            }
            out.push(mine);
        }
        assert_eq!(seen.len(), nq as usize, "{}: every queue given", s.name());
        out
    }

    #[test]
    fn averagely_gives_contiguous_blocks() {
        assert_eq!(
            check_partition(&Averagely, 8, 3),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
        );
        let two = check_partition(&Averagely, 2, 3);
        assert_eq!(two, vec![vec![0], vec![1], vec![]]);
    }

    #[test]
    fn by_circle_deals_round_robin() {
        assert_eq!(
            check_partition(&AveragelyByCircle, 8, 3),
            vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]
        );
    }

    #[test]
    fn consistent_hash_partitions_and_moves_little() {
        let s = ConsistentHash::default();
        let before = check_partition(&s, 64, 3);
        let after = check_partition(&s, 64, 4);
        // Queues of the three old members either stay or move to the new member.
        for (i, old) in before.iter().enumerate() {
            for q in old {
                assert!(after[i].contains(q) || after[3].contains(q));
            }
        }
    }

    #[test]
    fn by_config_keeps_only_existing_queues() {
        let mut wanted = queues(2);
        wanted.push(MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 99,
        });
        let s = ByConfig { queues: wanted };
        let got = s.allocate("g", "c0", &queues(4), &members(2));
        assert_eq!(got, queues(2));
    }

    #[test]
    fn a_stranger_gets_nothing() {
        for s in [
            &Averagely as &dyn AllocateStrategy,
            &AveragelyByCircle,
            &ConsistentHash::default(),
        ] {
            assert!(s.allocate("g", "x", &queues(4), &members(2)).is_empty());
        }
    }
}
