//! Request and response codes, numbered as in apache/rocketmq `RequestCode.java`,
//! `ResponseCode.java` and `RemotingSysResponseCode.java` (checked against the 5.x sources).
//! Plain `i32` constants: request and response codes share one number space per direction
//! (`GET_BROKER_CONFIG` and `SUBSCRIPTION_GROUP_NOT_EXIST` are both 26), so the module says
//! which is which.

/// Request codes (`RemotingCommand::code` of a request).
pub mod request {
    pub const SEND_MESSAGE: i32 = 10;
    pub const PULL_MESSAGE: i32 = 11;
    pub const QUERY_MESSAGE: i32 = 12;
    pub const QUERY_BROKER_OFFSET: i32 = 13;
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    pub const UPDATE_AND_CREATE_TOPIC_LIST: i32 = 18;
    pub const GET_ALL_TOPIC_CONFIG: i32 = 21;
    pub const GET_TOPIC_CONFIG_LIST: i32 = 22;
    pub const GET_TOPIC_NAME_LIST: i32 = 23;
    pub const UPDATE_BROKER_CONFIG: i32 = 25;
    pub const GET_BROKER_CONFIG: i32 = 26;
    pub const TRIGGER_DELETE_FILES: i32 = 27;
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    pub const GET_MAX_OFFSET: i32 = 30;
    pub const GET_MIN_OFFSET: i32 = 31;
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    pub const HEART_BEAT: i32 = 34;
    pub const UNREGISTER_CLIENT: i32 = 35;
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    pub const END_TRANSACTION: i32 = 37;
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    pub const LOCK_BATCH_MQ: i32 = 41;
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    pub const GET_ALL_CONSUMER_OFFSET: i32 = 43;
    pub const GET_ALL_DELAY_OFFSET: i32 = 45;
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    pub const GET_CLIENT_CONFIG: i32 = 47;
    pub const PUT_KV_CONFIG: i32 = 100;
    pub const GET_KV_CONFIG: i32 = 101;
    pub const DELETE_KV_CONFIG: i32 = 102;
    pub const REGISTER_BROKER: i32 = 103;
    pub const UNREGISTER_BROKER: i32 = 104;
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    pub const GET_PRODUCER_CONNECTION_LIST: i32 = 204;
    pub const WIPE_WRITE_PERM_OF_BROKER: i32 = 205;
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    pub const DELETE_SUBSCRIPTIONGROUP: i32 = 207;
    pub const GET_CONSUME_STATS: i32 = 208;
    pub const SUSPEND_CONSUMER: i32 = 209;
    pub const RESUME_CONSUMER: i32 = 210;
    pub const RESET_CONSUMER_OFFSET_IN_CONSUMER: i32 = 211;
    pub const RESET_CONSUMER_OFFSET_IN_BROKER: i32 = 212;
    pub const ADJUST_CONSUMER_THREAD_POOL: i32 = 213;
    pub const WHO_CONSUME_THE_MESSAGE: i32 = 214;
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    pub const REGISTER_TOPIC_IN_NAMESRV: i32 = 217;
    pub const GET_KVLIST_BY_NAMESPACE: i32 = 219;
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    pub const INVOKE_BROKER_TO_GET_CONSUMER_STATUS: i32 = 223;
    pub const GET_TOPICS_BY_CLUSTER: i32 = 224;
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: i32 = 225;
    pub const QUERY_TOPIC_CONSUME_BY_WHO: i32 = 300;
    pub const REGISTER_FILTER_SERVER: i32 = 301;
    pub const REGISTER_MESSAGE_FILTER_CLASS: i32 = 302;
    pub const QUERY_CONSUME_TIME_SPAN: i32 = 303;
    pub const GET_SYSTEM_TOPIC_LIST_FROM_NS: i32 = 304;
    pub const GET_SYSTEM_TOPIC_LIST_FROM_BROKER: i32 = 305;
    pub const CLEAN_EXPIRED_CONSUMEQUEUE: i32 = 306;
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    pub const QUERY_CORRECTION_OFFSET: i32 = 308;
    pub const CONSUME_MESSAGE_DIRECTLY: i32 = 309;
    pub const SEND_MESSAGE_V2: i32 = 310;
    pub const GET_UNIT_TOPIC_LIST: i32 = 311;
    pub const GET_HAS_UNIT_SUB_TOPIC_LIST: i32 = 312;
    pub const GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: i32 = 313;
    pub const CLONE_GROUP_OFFSET: i32 = 314;
    pub const VIEW_BROKER_STATS_DATA: i32 = 315;
    pub const CLEAN_UNUSED_TOPIC: i32 = 316;
    pub const GET_BROKER_CONSUME_STATS: i32 = 317;
    pub const UPDATE_NAMESRV_CONFIG: i32 = 318;
    pub const GET_NAMESRV_CONFIG: i32 = 319;
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    pub const QUERY_CONSUME_QUEUE: i32 = 321;
    pub const QUERY_DATA_VERSION: i32 = 322;
    pub const RESUME_CHECK_HALF_MESSAGE: i32 = 323;
    pub const SEND_REPLY_MESSAGE: i32 = 324;
    pub const SEND_REPLY_MESSAGE_V2: i32 = 325;
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: i32 = 326;
    pub const ADD_WRITE_PERM_OF_BROKER: i32 = 327;
    pub const GET_ALL_PRODUCER_INFO: i32 = 328;
    pub const DELETE_EXPIRED_COMMITLOG: i32 = 329;
    pub const QUERY_TOPICS_BY_CONSUMER: i32 = 343;
    pub const QUERY_SUBSCRIPTION_BY_CONSUMER: i32 = 345;
    pub const GET_TOPIC_CONFIG: i32 = 351;
    pub const GET_SUBSCRIPTIONGROUP_CONFIG: i32 = 352;
    pub const LITE_PULL_MESSAGE: i32 = 361;
    /// RocketMQ 5.5: withdraw a delayed message not yet delivered, by its recall handle.
    pub const RECALL_MESSAGE: i32 = 370;
    pub const QUERY_ASSIGNMENT: i32 = 400;
    pub const SET_MESSAGE_REQUEST_MODE: i32 = 401;
    pub const GET_ALL_MESSAGE_REQUEST_MODE: i32 = 402;
    pub const GET_BROKER_MEMBER_GROUP: i32 = 901;
    pub const GET_BROKER_HA_STATUS: i32 = 907;
    /// RocketMQ 5.3's ACL 2.0 administration (users and ACLs, served by the broker).
    pub const AUTH_CREATE_USER: i32 = 3001;
    pub const AUTH_UPDATE_USER: i32 = 3002;
    pub const AUTH_DELETE_USER: i32 = 3003;
    pub const AUTH_GET_USER: i32 = 3004;
    pub const AUTH_LIST_USER: i32 = 3005;
    pub const AUTH_CREATE_ACL: i32 = 3006;
    pub const AUTH_UPDATE_ACL: i32 = 3007;
    pub const AUTH_DELETE_ACL: i32 = 3008;
    pub const AUTH_GET_ACL: i32 = 3009;
    pub const AUTH_LIST_ACL: i32 = 3010;
    pub const UPDATE_COLD_DATA_FLOW_CTR_CONFIG: i32 = 2001;
    pub const REMOVE_COLD_DATA_FLOW_CTR_CONFIG: i32 = 2002;
    pub const GET_COLD_DATA_FLOW_CTR_INFO: i32 = 2003;
    pub const SWITCH_TIMER_ENGINE: i32 = 5001;
    pub const ADD_BROKER: i32 = 902;
    pub const REMOVE_BROKER: i32 = 903;
    pub const BROKER_HEARTBEAT: i32 = 904;
    pub const NOTIFY_MIN_BROKER_ID_CHANGE: i32 = 905;
    pub const POP_MESSAGE: i32 = 200050;
    pub const ACK_MESSAGE: i32 = 200051;
    pub const PEEK_MESSAGE: i32 = 200052;
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200053;
    pub const NOTIFICATION: i32 = 200054;
    pub const POLLING_INFO: i32 = 200055;
    pub const BATCH_ACK_MESSAGE: i32 = 200151;
    /// Lite Topics (RocketMQ 5.5).
    pub const POP_LITE_MESSAGE: i32 = 200070;
    pub const LITE_SUBSCRIPTION_CTL: i32 = 200071;
    pub const ACK_LITE_MESSAGE: i32 = 200072;
    pub const NOTIFY_UNSUBSCRIBE_LITE: i32 = 200073;
    pub const GET_BROKER_LITE_INFO: i32 = 200074;

    /// The Java name of a code, for logs and remarks.
    pub fn name(code: i32) -> Option<&'static str> {
        ALL.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
    }

    /// Every code in this module with its Java name.
    pub const ALL: [(i32, &str); 136] = [
        (SEND_MESSAGE, "SEND_MESSAGE"),
        (PULL_MESSAGE, "PULL_MESSAGE"),
        (QUERY_MESSAGE, "QUERY_MESSAGE"),
        (QUERY_BROKER_OFFSET, "QUERY_BROKER_OFFSET"),
        (QUERY_CONSUMER_OFFSET, "QUERY_CONSUMER_OFFSET"),
        (UPDATE_CONSUMER_OFFSET, "UPDATE_CONSUMER_OFFSET"),
        (UPDATE_AND_CREATE_TOPIC, "UPDATE_AND_CREATE_TOPIC"),
        (UPDATE_AND_CREATE_TOPIC_LIST, "UPDATE_AND_CREATE_TOPIC_LIST"),
        (GET_ALL_TOPIC_CONFIG, "GET_ALL_TOPIC_CONFIG"),
        (GET_TOPIC_CONFIG_LIST, "GET_TOPIC_CONFIG_LIST"),
        (GET_TOPIC_NAME_LIST, "GET_TOPIC_NAME_LIST"),
        (UPDATE_BROKER_CONFIG, "UPDATE_BROKER_CONFIG"),
        (GET_BROKER_CONFIG, "GET_BROKER_CONFIG"),
        (TRIGGER_DELETE_FILES, "TRIGGER_DELETE_FILES"),
        (GET_BROKER_RUNTIME_INFO, "GET_BROKER_RUNTIME_INFO"),
        (SEARCH_OFFSET_BY_TIMESTAMP, "SEARCH_OFFSET_BY_TIMESTAMP"),
        (GET_MAX_OFFSET, "GET_MAX_OFFSET"),
        (GET_MIN_OFFSET, "GET_MIN_OFFSET"),
        (GET_EARLIEST_MSG_STORETIME, "GET_EARLIEST_MSG_STORETIME"),
        (VIEW_MESSAGE_BY_ID, "VIEW_MESSAGE_BY_ID"),
        (HEART_BEAT, "HEART_BEAT"),
        (UNREGISTER_CLIENT, "UNREGISTER_CLIENT"),
        (CONSUMER_SEND_MSG_BACK, "CONSUMER_SEND_MSG_BACK"),
        (END_TRANSACTION, "END_TRANSACTION"),
        (GET_CONSUMER_LIST_BY_GROUP, "GET_CONSUMER_LIST_BY_GROUP"),
        (CHECK_TRANSACTION_STATE, "CHECK_TRANSACTION_STATE"),
        (NOTIFY_CONSUMER_IDS_CHANGED, "NOTIFY_CONSUMER_IDS_CHANGED"),
        (LOCK_BATCH_MQ, "LOCK_BATCH_MQ"),
        (UNLOCK_BATCH_MQ, "UNLOCK_BATCH_MQ"),
        (GET_ALL_CONSUMER_OFFSET, "GET_ALL_CONSUMER_OFFSET"),
        (GET_ALL_DELAY_OFFSET, "GET_ALL_DELAY_OFFSET"),
        (CHECK_CLIENT_CONFIG, "CHECK_CLIENT_CONFIG"),
        (GET_CLIENT_CONFIG, "GET_CLIENT_CONFIG"),
        (PUT_KV_CONFIG, "PUT_KV_CONFIG"),
        (GET_KV_CONFIG, "GET_KV_CONFIG"),
        (DELETE_KV_CONFIG, "DELETE_KV_CONFIG"),
        (REGISTER_BROKER, "REGISTER_BROKER"),
        (UNREGISTER_BROKER, "UNREGISTER_BROKER"),
        (GET_ROUTEINFO_BY_TOPIC, "GET_ROUTEINFO_BY_TOPIC"),
        (GET_BROKER_CLUSTER_INFO, "GET_BROKER_CLUSTER_INFO"),
        (
            UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
        ),
        (
            GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
            "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        ),
        (GET_TOPIC_STATS_INFO, "GET_TOPIC_STATS_INFO"),
        (GET_CONSUMER_CONNECTION_LIST, "GET_CONSUMER_CONNECTION_LIST"),
        (GET_PRODUCER_CONNECTION_LIST, "GET_PRODUCER_CONNECTION_LIST"),
        (WIPE_WRITE_PERM_OF_BROKER, "WIPE_WRITE_PERM_OF_BROKER"),
        (
            GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
        ),
        (DELETE_SUBSCRIPTIONGROUP, "DELETE_SUBSCRIPTIONGROUP"),
        (GET_CONSUME_STATS, "GET_CONSUME_STATS"),
        (SUSPEND_CONSUMER, "SUSPEND_CONSUMER"),
        (RESUME_CONSUMER, "RESUME_CONSUMER"),
        (
            RESET_CONSUMER_OFFSET_IN_CONSUMER,
            "RESET_CONSUMER_OFFSET_IN_CONSUMER",
        ),
        (
            RESET_CONSUMER_OFFSET_IN_BROKER,
            "RESET_CONSUMER_OFFSET_IN_BROKER",
        ),
        (ADJUST_CONSUMER_THREAD_POOL, "ADJUST_CONSUMER_THREAD_POOL"),
        (WHO_CONSUME_THE_MESSAGE, "WHO_CONSUME_THE_MESSAGE"),
        (DELETE_TOPIC_IN_BROKER, "DELETE_TOPIC_IN_BROKER"),
        (DELETE_TOPIC_IN_NAMESRV, "DELETE_TOPIC_IN_NAMESRV"),
        (REGISTER_TOPIC_IN_NAMESRV, "REGISTER_TOPIC_IN_NAMESRV"),
        (GET_KVLIST_BY_NAMESPACE, "GET_KVLIST_BY_NAMESPACE"),
        (RESET_CONSUMER_CLIENT_OFFSET, "RESET_CONSUMER_CLIENT_OFFSET"),
        (
            GET_CONSUMER_STATUS_FROM_CLIENT,
            "GET_CONSUMER_STATUS_FROM_CLIENT",
        ),
        (
            INVOKE_BROKER_TO_RESET_OFFSET,
            "INVOKE_BROKER_TO_RESET_OFFSET",
        ),
        (
            INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
            "INVOKE_BROKER_TO_GET_CONSUMER_STATUS",
        ),
        (GET_TOPICS_BY_CLUSTER, "GET_TOPICS_BY_CLUSTER"),
        (
            UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
            "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST",
        ),
        (QUERY_TOPIC_CONSUME_BY_WHO, "QUERY_TOPIC_CONSUME_BY_WHO"),
        (REGISTER_FILTER_SERVER, "REGISTER_FILTER_SERVER"),
        (
            REGISTER_MESSAGE_FILTER_CLASS,
            "REGISTER_MESSAGE_FILTER_CLASS",
        ),
        (QUERY_CONSUME_TIME_SPAN, "QUERY_CONSUME_TIME_SPAN"),
        (
            GET_SYSTEM_TOPIC_LIST_FROM_NS,
            "GET_SYSTEM_TOPIC_LIST_FROM_NS",
        ),
        (
            GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
            "GET_SYSTEM_TOPIC_LIST_FROM_BROKER",
        ),
        (CLEAN_EXPIRED_CONSUMEQUEUE, "CLEAN_EXPIRED_CONSUMEQUEUE"),
        (GET_CONSUMER_RUNNING_INFO, "GET_CONSUMER_RUNNING_INFO"),
        (QUERY_CORRECTION_OFFSET, "QUERY_CORRECTION_OFFSET"),
        (CONSUME_MESSAGE_DIRECTLY, "CONSUME_MESSAGE_DIRECTLY"),
        (SEND_MESSAGE_V2, "SEND_MESSAGE_V2"),
        (GET_UNIT_TOPIC_LIST, "GET_UNIT_TOPIC_LIST"),
        (GET_HAS_UNIT_SUB_TOPIC_LIST, "GET_HAS_UNIT_SUB_TOPIC_LIST"),
        (
            GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
            "GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST",
        ),
        (CLONE_GROUP_OFFSET, "CLONE_GROUP_OFFSET"),
        (VIEW_BROKER_STATS_DATA, "VIEW_BROKER_STATS_DATA"),
        (CLEAN_UNUSED_TOPIC, "CLEAN_UNUSED_TOPIC"),
        (GET_BROKER_CONSUME_STATS, "GET_BROKER_CONSUME_STATS"),
        (UPDATE_NAMESRV_CONFIG, "UPDATE_NAMESRV_CONFIG"),
        (GET_NAMESRV_CONFIG, "GET_NAMESRV_CONFIG"),
        (SEND_BATCH_MESSAGE, "SEND_BATCH_MESSAGE"),
        (QUERY_CONSUME_QUEUE, "QUERY_CONSUME_QUEUE"),
        (QUERY_DATA_VERSION, "QUERY_DATA_VERSION"),
        (RESUME_CHECK_HALF_MESSAGE, "RESUME_CHECK_HALF_MESSAGE"),
        (SEND_REPLY_MESSAGE, "SEND_REPLY_MESSAGE"),
        (SEND_REPLY_MESSAGE_V2, "SEND_REPLY_MESSAGE_V2"),
        (PUSH_REPLY_MESSAGE_TO_CLIENT, "PUSH_REPLY_MESSAGE_TO_CLIENT"),
        (ADD_WRITE_PERM_OF_BROKER, "ADD_WRITE_PERM_OF_BROKER"),
        (GET_ALL_PRODUCER_INFO, "GET_ALL_PRODUCER_INFO"),
        (DELETE_EXPIRED_COMMITLOG, "DELETE_EXPIRED_COMMITLOG"),
        (QUERY_TOPICS_BY_CONSUMER, "QUERY_TOPICS_BY_CONSUMER"),
        (
            QUERY_SUBSCRIPTION_BY_CONSUMER,
            "QUERY_SUBSCRIPTION_BY_CONSUMER",
        ),
        (GET_TOPIC_CONFIG, "GET_TOPIC_CONFIG"),
        (GET_SUBSCRIPTIONGROUP_CONFIG, "GET_SUBSCRIPTIONGROUP_CONFIG"),
        (LITE_PULL_MESSAGE, "LITE_PULL_MESSAGE"),
        (QUERY_ASSIGNMENT, "QUERY_ASSIGNMENT"),
        (SET_MESSAGE_REQUEST_MODE, "SET_MESSAGE_REQUEST_MODE"),
        (GET_ALL_MESSAGE_REQUEST_MODE, "GET_ALL_MESSAGE_REQUEST_MODE"),
        (GET_BROKER_MEMBER_GROUP, "GET_BROKER_MEMBER_GROUP"),
        (GET_BROKER_HA_STATUS, "GET_BROKER_HA_STATUS"),
        (AUTH_CREATE_USER, "AUTH_CREATE_USER"),
        (AUTH_UPDATE_USER, "AUTH_UPDATE_USER"),
        (AUTH_DELETE_USER, "AUTH_DELETE_USER"),
        (AUTH_GET_USER, "AUTH_GET_USER"),
        (AUTH_LIST_USER, "AUTH_LIST_USER"),
        (AUTH_CREATE_ACL, "AUTH_CREATE_ACL"),
        (AUTH_UPDATE_ACL, "AUTH_UPDATE_ACL"),
        (AUTH_DELETE_ACL, "AUTH_DELETE_ACL"),
        (AUTH_GET_ACL, "AUTH_GET_ACL"),
        (AUTH_LIST_ACL, "AUTH_LIST_ACL"),
        (
            UPDATE_COLD_DATA_FLOW_CTR_CONFIG,
            "UPDATE_COLD_DATA_FLOW_CTR_CONFIG",
        ),
        (
            REMOVE_COLD_DATA_FLOW_CTR_CONFIG,
            "REMOVE_COLD_DATA_FLOW_CTR_CONFIG",
        ),
        (GET_COLD_DATA_FLOW_CTR_INFO, "GET_COLD_DATA_FLOW_CTR_INFO"),
        (SWITCH_TIMER_ENGINE, "SWITCH_TIMER_ENGINE"),
        (ADD_BROKER, "ADD_BROKER"),
        (REMOVE_BROKER, "REMOVE_BROKER"),
        (BROKER_HEARTBEAT, "BROKER_HEARTBEAT"),
        (NOTIFY_MIN_BROKER_ID_CHANGE, "NOTIFY_MIN_BROKER_ID_CHANGE"),
        (RECALL_MESSAGE, "RECALL_MESSAGE"),
        (POP_MESSAGE, "POP_MESSAGE"),
        (ACK_MESSAGE, "ACK_MESSAGE"),
        (PEEK_MESSAGE, "PEEK_MESSAGE"),
        (CHANGE_MESSAGE_INVISIBLETIME, "CHANGE_MESSAGE_INVISIBLETIME"),
        (NOTIFICATION, "NOTIFICATION"),
        (POLLING_INFO, "POLLING_INFO"),
        (BATCH_ACK_MESSAGE, "BATCH_ACK_MESSAGE"),
        (POP_LITE_MESSAGE, "POP_LITE_MESSAGE"),
        (LITE_SUBSCRIPTION_CTL, "LITE_SUBSCRIPTION_CTL"),
        (ACK_LITE_MESSAGE, "ACK_LITE_MESSAGE"),
        (NOTIFY_UNSUBSCRIBE_LITE, "NOTIFY_UNSUBSCRIBE_LITE"),
        (GET_BROKER_LITE_INFO, "GET_BROKER_LITE_INFO"),
    ];
}

/// Response codes (`RemotingCommand::code` of a response).
pub mod response {
    pub const SUCCESS: i32 = 0;
    pub const SYSTEM_ERROR: i32 = 1;
    pub const SYSTEM_BUSY: i32 = 2;
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    pub const TRANSACTION_FAILED: i32 = 4;
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    pub const NO_PERMISSION: i32 = 16;
    pub const TOPIC_NOT_EXIST: i32 = 17;
    pub const TOPIC_EXIST_ALREADY: i32 = 18;
    pub const PULL_NOT_FOUND: i32 = 19;
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    pub const PULL_OFFSET_MOVED: i32 = 21;
    pub const QUERY_NOT_FOUND: i32 = 22;
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    pub const FILTER_DATA_NOT_EXIST: i32 = 27;
    pub const FILTER_DATA_NOT_LATEST: i32 = 28;
    pub const INVALID_PARAMETER: i32 = 29;
    pub const TRANSACTION_SHOULD_COMMIT: i32 = 200;
    pub const TRANSACTION_SHOULD_ROLLBACK: i32 = 201;
    pub const TRANSACTION_STATE_UNKNOW: i32 = 202;
    pub const TRANSACTION_STATE_GROUP_WRONG: i32 = 203;
    pub const NO_BUYER_ID: i32 = 204;
    pub const NOT_IN_CURRENT_UNIT: i32 = 205;
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    pub const CONSUME_MSG_TIMEOUT: i32 = 207;
    pub const NO_MESSAGE: i32 = 208;
    pub const POLLING_FULL: i32 = 209;
    pub const POLLING_TIMEOUT: i32 = 210;
    pub const BROKER_NOT_EXIST: i32 = 211;
    pub const BROKER_DISPATCH_NOT_COMPLETE: i32 = 212;
    pub const BROADCAST_CONSUMPTION: i32 = 213;
    pub const FLOW_CONTROL: i32 = 215;
    pub const NOT_LEADER_FOR_QUEUE: i32 = 501;
    pub const ILLEGAL_OPERATION: i32 = 604;
    pub const GO_AWAY: i32 = 1500;
    pub const USER_NOT_EXIST: i32 = 3001;
    pub const POLICY_NOT_EXIST: i32 = 3002;
    /// Lite Topics (RocketMQ 5.5): the broker's lite topic quota, a client's subscription
    /// quota.
    pub const LMQ_QUOTA_EXCEEDED: i32 = 2017;
    pub const LITE_SUBSCRIPTION_QUOTA_EXCEEDED: i32 = 2018;

    /// The Java name of a code, for logs and remarks.
    pub fn name(code: i32) -> Option<&'static str> {
        ALL.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
    }

    /// Every code in this module with its Java name.
    pub const ALL: [(i32, &str); 47] = [
        (SUCCESS, "SUCCESS"),
        (SYSTEM_ERROR, "SYSTEM_ERROR"),
        (SYSTEM_BUSY, "SYSTEM_BUSY"),
        (REQUEST_CODE_NOT_SUPPORTED, "REQUEST_CODE_NOT_SUPPORTED"),
        (TRANSACTION_FAILED, "TRANSACTION_FAILED"),
        (FLUSH_DISK_TIMEOUT, "FLUSH_DISK_TIMEOUT"),
        (SLAVE_NOT_AVAILABLE, "SLAVE_NOT_AVAILABLE"),
        (FLUSH_SLAVE_TIMEOUT, "FLUSH_SLAVE_TIMEOUT"),
        (MESSAGE_ILLEGAL, "MESSAGE_ILLEGAL"),
        (SERVICE_NOT_AVAILABLE, "SERVICE_NOT_AVAILABLE"),
        (VERSION_NOT_SUPPORTED, "VERSION_NOT_SUPPORTED"),
        (NO_PERMISSION, "NO_PERMISSION"),
        (TOPIC_NOT_EXIST, "TOPIC_NOT_EXIST"),
        (TOPIC_EXIST_ALREADY, "TOPIC_EXIST_ALREADY"),
        (PULL_NOT_FOUND, "PULL_NOT_FOUND"),
        (PULL_RETRY_IMMEDIATELY, "PULL_RETRY_IMMEDIATELY"),
        (PULL_OFFSET_MOVED, "PULL_OFFSET_MOVED"),
        (QUERY_NOT_FOUND, "QUERY_NOT_FOUND"),
        (SUBSCRIPTION_PARSE_FAILED, "SUBSCRIPTION_PARSE_FAILED"),
        (SUBSCRIPTION_NOT_EXIST, "SUBSCRIPTION_NOT_EXIST"),
        (SUBSCRIPTION_NOT_LATEST, "SUBSCRIPTION_NOT_LATEST"),
        (SUBSCRIPTION_GROUP_NOT_EXIST, "SUBSCRIPTION_GROUP_NOT_EXIST"),
        (FILTER_DATA_NOT_EXIST, "FILTER_DATA_NOT_EXIST"),
        (FILTER_DATA_NOT_LATEST, "FILTER_DATA_NOT_LATEST"),
        (INVALID_PARAMETER, "INVALID_PARAMETER"),
        (TRANSACTION_SHOULD_COMMIT, "TRANSACTION_SHOULD_COMMIT"),
        (TRANSACTION_SHOULD_ROLLBACK, "TRANSACTION_SHOULD_ROLLBACK"),
        (TRANSACTION_STATE_UNKNOW, "TRANSACTION_STATE_UNKNOW"),
        (
            TRANSACTION_STATE_GROUP_WRONG,
            "TRANSACTION_STATE_GROUP_WRONG",
        ),
        (NO_BUYER_ID, "NO_BUYER_ID"),
        (NOT_IN_CURRENT_UNIT, "NOT_IN_CURRENT_UNIT"),
        (CONSUMER_NOT_ONLINE, "CONSUMER_NOT_ONLINE"),
        (CONSUME_MSG_TIMEOUT, "CONSUME_MSG_TIMEOUT"),
        (NO_MESSAGE, "NO_MESSAGE"),
        (POLLING_FULL, "POLLING_FULL"),
        (POLLING_TIMEOUT, "POLLING_TIMEOUT"),
        (BROKER_NOT_EXIST, "BROKER_NOT_EXIST"),
        (BROKER_DISPATCH_NOT_COMPLETE, "BROKER_DISPATCH_NOT_COMPLETE"),
        (BROADCAST_CONSUMPTION, "BROADCAST_CONSUMPTION"),
        (FLOW_CONTROL, "FLOW_CONTROL"),
        (NOT_LEADER_FOR_QUEUE, "NOT_LEADER_FOR_QUEUE"),
        (ILLEGAL_OPERATION, "ILLEGAL_OPERATION"),
        (GO_AWAY, "GO_AWAY"),
        (USER_NOT_EXIST, "USER_NOT_EXIST"),
        (POLICY_NOT_EXIST, "POLICY_NOT_EXIST"),
        (LMQ_QUOTA_EXCEEDED, "LMQ_QUOTA_EXCEEDED"),
        (
            LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
            "LITE_SUBSCRIPTION_QUOTA_EXCEEDED",
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_rocketmq() {
        assert_eq!(request::SEND_MESSAGE_V2, 310);
        assert_eq!(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206);
        assert_eq!(request::GET_BROKER_CONFIG, 26);
        assert_eq!(request::QUERY_DATA_VERSION, 322);
        assert_eq!(request::BROKER_HEARTBEAT, 904);
        assert_eq!(request::LITE_PULL_MESSAGE, 361);
        assert_eq!(request::POP_MESSAGE, 200050);
        assert_eq!(request::RECALL_MESSAGE, 370);
        assert_eq!(request::name(370), Some("RECALL_MESSAGE"));
        assert_eq!(request::NOTIFICATION, 200054);
        assert_eq!(request::BATCH_ACK_MESSAGE, 200151);
        assert_eq!(request::name(200053), Some("CHANGE_MESSAGE_INVISIBLETIME"));
        assert_eq!(response::SUBSCRIPTION_GROUP_NOT_EXIST, 26);
        assert_eq!(response::PULL_NOT_FOUND, 19);
        assert_eq!(response::NO_PERMISSION, 16);
        assert_eq!(request::name(105), Some("GET_ROUTEINFO_BY_TOPIC"));
        assert_eq!(response::name(3), Some("REQUEST_CODE_NOT_SUPPORTED"));
        assert_eq!(request::name(-5), None);
    }

    #[test]
    fn no_number_is_used_twice_within_a_direction() {
        for all in [&request::ALL[..], &response::ALL[..]] {
            let mut codes: Vec<i32> = all.iter().map(|(c, _)| *c).collect();
            codes.sort_unstable();
            let n = codes.len();
            codes.dedup();
            assert_eq!(codes.len(), n);
        }
    }
}
