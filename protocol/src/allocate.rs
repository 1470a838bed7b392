//! RocketMQ's two queue allocation strategies that brokers also run (QUERY_ASSIGNMENT) as
//! pure index math: member `index` of `members` (sorted, as every member sorts them) gets
//! these positions of the sorted queue list. Shared by the client's strategies and the
//! broker's assignment, so both allocate alike.

use std::ops::Range;

/// Contiguous blocks of `queues / members` positions, the first `queues % members` members
/// one more (RocketMQ's AllocateMessageQueueAveragely, "AVG"). Empty for an `index` past
/// the members or without queues.
pub fn averagely(index: usize, queues: usize, members: usize) -> Range<usize> {
    if index >= members || queues == 0 {
        return 0..0;
    }
    let rem = queues % members;
    let size = if queues <= members {
        1
    } else if rem > 0 && index < rem {
        queues / members + 1
    } else {
        queues / members
    };
    let start = if rem > 0 && index < rem {
        index * size
    } else {
        index * size + rem
    };
    let range = size.min(queues.saturating_sub(start));
    start..start + range
}

/// Position i goes to member i mod members (RocketMQ's AllocateMessageQueueAveragelyByCircle,
/// "AVG_BY_CIRCLE").
pub fn by_circle(index: usize, queues: usize, members: usize) -> impl Iterator<Item = usize> {
    let step = members.max(1);
    (index..queues)
        .step_by(step)
        .filter(move |_| index < members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averagely_gives_blocks_and_the_first_members_one_more() {
        let all: Vec<Vec<usize>> = (0..3).map(|i| averagely(i, 8, 3).collect()).collect();
        assert_eq!(all, [vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
        // More members than queues: the first ones get one each, the rest none.
        let all: Vec<Vec<usize>> = (0..3).map(|i| averagely(i, 2, 3).collect()).collect();
        assert_eq!(all, [vec![0], vec![1], vec![]]);
        assert_eq!(averagely(3, 8, 3), 0..0);
        assert_eq!(averagely(0, 0, 3), 0..0);
    }

    #[test]
    fn by_circle_deals_positions_in_turn() {
        let all: Vec<Vec<usize>> = (0..3).map(|i| by_circle(i, 8, 3).collect()).collect();
        assert_eq!(all, [vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]);
        assert_eq!(by_circle(3, 8, 3).count(), 0);
    }
}
