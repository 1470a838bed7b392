//! Request-reply (RocketMQ 4.6+) as messages carry it: the property names a request and its
//! reply hold, and where replies go. The broker (which pushes replies to their requesters)
//! and the client (which sends requests and builds replies) both read these.

/// Property names of request-reply (RocketMQ's MessageConst).
pub mod prop {
    pub const CORRELATION_ID: &str = "CORRELATION_ID";
    pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
    pub const TTL: &str = "TTL";
    pub const MSG_TYPE: &str = "MSG_TYPE";
    /// The cluster a request was stored in: the replier's client builds the reply topic's
    /// name from it (Java `MessageUtil.createReplyMessage` refuses a request without it).
    pub const CLUSTER: &str = "CLUSTER";
    /// When the broker pushed a reply to its requester.
    pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
}

/// `MSG_TYPE`'s value on a reply.
pub const REPLY_MESSAGE_FLAG: &str = "reply";

/// The cluster's reply topic (RocketMQ's `MixAll.getReplyTopic`).
pub fn reply_topic(cluster: &str) -> String {
    format!("{cluster}_REPLY_TOPIC")
}

#[cfg(test)]
mod tests {
    #[test]
    fn reply_topic_is_named_after_the_cluster() {
        assert_eq!(
            super::reply_topic("DefaultCluster"),
            "DefaultCluster_REPLY_TOPIC"
        );
    }
}
