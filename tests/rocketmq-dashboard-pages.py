"""The REST calls rocketmq-dashboard's pages make, against a dashboard backend that manages a
corvus cluster prepared by tests/rocketmq-dashboard-pages.sh: one line per call (HTTP status,
whether it answered with data, and what it answered when not) and "N of M answer with data".

    python3 rocketmq-dashboard-pages.py DASHBOARD_URL CLIENTS_LOG ADMIN_USER

ADMIN_USER: the super user the dashboard signs as, which the ACL page lists.
DASHBOARD_BROKERS: how many brokers the cluster page lists at least (2: corvus's cores).

DASHBOARD_ANSWERS=FILE keeps every answer there, as JSON by call. "With data" means status 0 in the dashboard's JsonResult and the page's content: the topic,
groups, messages, connections or chart values the page shows, not an empty list or zeros.
"""
import datetime
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE, CLIENTS_LOG, ADMIN = sys.argv[1], sys.argv[2], sys.argv[3]
TOPIC, GROUP, OFFLINE, PRODUCER = "DashTopic", "DashGroup", "DashOffline", "DashProducer"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"

sent = [line.split() for line in open(CLIENTS_LOG) if line.startswith("SENT ")]
MSG_ID, MSG_KEY = sent[0][1], sent[0][2]
results = []
answers = {}


def call(method, path, params=None, body=None):
    url = BASE + path
    if params:
        url += "?" + urllib.parse.urlencode(params)
    data, headers = None, {}
    if body is not None:
        data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
    elif method == "POST":
        data = b""
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text = r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode("utf-8", "replace")
    except Exception as e:  # a timeout or a refused connection is a failed call
        status, text = 0, repr(e)
    try:
        answer = json.loads(text)
    except ValueError:
        answer = text
    return status, answer


def check(name, method, path, params=None, body=None, ok=lambda d: bool(d)):
    """Calls; the call has data when the HTTP status is 200, the JsonResult's status 0 and
    `ok(data)` holds. Returns the data (None when the call failed)."""
    status, answer = call(method, path, params, body)
    data, err = None, None
    if isinstance(answer, dict) and "status" in answer and "data" in answer:
        if answer.get("status") == 0:
            data = answer.get("data")
        else:
            err = answer.get("errMsg")
    elif status == 200:
        data = answer
    else:
        err = answer
    try:
        good = status == 200 and err is None and bool(ok(data))
    except Exception as e:  # the data is not shaped as the page reads it
        good, err = False, "unexpected data: %r" % e
    note = "" if good else (str(err) if err else json.dumps(data)[:160])
    results.append((name, status, good, note))
    answers[name] = answer
    return data


def nonzero_points(series, fields):
    """True when a chart series ("time,v1,v2,...") has a non-zero value in one of `fields`."""
    return any(float(p.split(",")[f]) > 0 for p in series for f in fields)


today = datetime.date.today().isoformat()
now_ms = int(time.time() * 1000)

# Cluster page.
cluster = check("cluster/list.query", "GET", "/cluster/list.query",
                ok=lambda d: len(d["clusterInfo"]["brokerAddrTable"])
                >= int(os.environ.get("DASHBOARD_BROKERS", "2")) and d["brokerServer"])
brokers = cluster["clusterInfo"]["brokerAddrTable"] if cluster else {}
broker_names = sorted(brokers)
broker_addr = brokers[broker_names[0]]["brokerAddrs"]["0"] if brokers else ""
check("cluster/brokerConfig.query", "GET", "/cluster/brokerConfig.query",
      {"brokerAddr": broker_addr}, ok=lambda d: d.get("brokerName"))

# Dashboard page: the charts the collector filled.
check("dashboard/broker.query", "GET", "/dashboard/broker.query", {"date": today},
      ok=lambda d: any(nonzero_points(v, [1]) for v in d.values()))
check("dashboard/topic.query", "GET", "/dashboard/topic.query",
      {"date": today, "topicName": TOPIC}, ok=lambda d: nonzero_points(d, [1, 2, 3, 4]))
check("dashboard/topic.query (all)", "GET", "/dashboard/topic.query", {"date": today},
      ok=lambda d: TOPIC in d)
check("dashboard/topicCurrent.query", "GET", "/dashboard/topicCurrent.query",
      ok=lambda d: any(e.startswith(TOPIC + ",") and int(e.split(",")[1]) > 0 for e in d))

# Topic page.
check("topic/list.query", "GET", "/topic/list.query",
      {"skipSysProcess": "false", "skipRetryAndDlq": "false"},
      ok=lambda d: TOPIC in d["topicList"])
check("topic/list.queryTopicType", "GET", "/topic/list.queryTopicType",
      ok=lambda d: TOPIC in d["topicNameList"])
check("topic/stats.query", "GET", "/topic/stats.query", {"topic": TOPIC},
      ok=lambda d: len(d["offsetTable"]) == 8
      and sum(v["maxOffset"] for v in d["offsetTable"].values()) >= 100
      # each queue's last update: the store time of its last message
      and all(v["lastUpdateTimestamp"] > now_ms - 3_600_000
              for v in d["offsetTable"].values() if v["maxOffset"] > 0))
check("topic/route.query", "GET", "/topic/route.query", {"topic": TOPIC},
      ok=lambda d: sum(q["readQueueNums"] for q in d["queueDatas"]) == 8)
check("topic/queryConsumerByTopic.query", "GET", "/topic/queryConsumerByTopic.query",
      {"topic": TOPIC}, ok=lambda d: GROUP in d and d[GROUP]["queueStatInfoList"])
check("topic/queryTopicConsumerInfo.query", "GET", "/topic/queryTopicConsumerInfo.query",
      {"topic": TOPIC}, ok=lambda d: GROUP in d["groupList"])
check("topic/examineTopicConfig.query", "GET", "/topic/examineTopicConfig.query",
      {"topic": TOPIC}, ok=lambda d: len(d) >= 1 and d[0]["topicName"] == TOPIC)

# Consumer page.
groups = check("consumer/groupList.query", "GET", "/consumer/groupList.query",
               {"skipSysGroup": "false", "address": ""},
               ok=lambda d: {GROUP, OFFLINE} <= {g["group"] for g in d}
               and any(g["group"] == GROUP and g["count"] > 0 for g in d)
               and any(g["group"] == OFFLINE and g["diffTotal"] > 0 for g in d)
               # it read 40 messages a minute or more ago: RocketMQ's minute rate, < 1
               and all(g["consumeTps"] <= 1 for g in d if g["group"] == OFFLINE)) or []
addresses = {g["group"]: ",".join(g.get("address") or []) for g in groups}
check("consumer/group.refresh", "GET", "/consumer/group.refresh",
      {"consumerGroup": GROUP, "address": ""}, ok=lambda d: d["group"] == GROUP and d["count"] > 0)
check("consumer/group.refresh.all", "GET", "/consumer/group.refresh.all",
      ok=lambda d: any(g["group"] == GROUP for g in d))
check("consumer/group.query", "GET", "/consumer/group.query",
      {"consumerGroup": OFFLINE, "address": ""}, ok=lambda d: d["diffTotal"] > 0)


def progress_once(d):
    """Consumer progress: each queue of the topic once (a table per broker of the route),
    the backlog of the offline group in it."""
    rows = [(q["brokerName"], q["queueId"]) for t in d if t["topic"] == TOPIC
            for q in t["queueStatInfoList"]]
    diff = sum(q["brokerOffset"] - q["consumerOffset"] for t in d if t["topic"] == TOPIC
               for q in t["queueStatInfoList"])
    return len(rows) == 8 and len(set(rows)) == 8 and diff > 0


check("consumer/queryTopicByConsumer.query", "GET", "/consumer/queryTopicByConsumer.query",
      {"consumerGroup": OFFLINE, "address": addresses.get(OFFLINE, "")}, ok=progress_once)
conn = check("consumer/consumerConnection.query", "GET", "/consumer/consumerConnection.query",
             {"consumerGroup": GROUP, "address": addresses.get(GROUP, "")}, ok=lambda d: d["connectionSet"])
client_id = conn["connectionSet"][0]["clientId"] if conn and conn.get("connectionSet") else ""
check("consumer/consumerRunningInfo.query", "GET", "/consumer/consumerRunningInfo.query",
      {"consumerGroup": GROUP, "clientId": client_id, "jstack": "false"},
      ok=lambda d: d["mqTable"] and d["subscriptionSet"])
check("consumer/examineSubscriptionGroupConfig.query", "GET",
      "/consumer/examineSubscriptionGroupConfig.query", {"consumerGroup": GROUP},
      ok=lambda d: d and d[0]["subscriptionGroupConfig"]["groupName"] == GROUP)
check("consumer/fetchBrokerNameList.query", "GET", "/consumer/fetchBrokerNameList.query",
      {"consumerGroup": GROUP}, ok=lambda d: set(d) == set(broker_names))
check("monitor/createOrUpdateConsumerMonitor.do", "POST",
      "/monitor/createOrUpdateConsumerMonitor.do",
      {"consumeGroupName": GROUP, "minCount": 1, "maxDiffTotal": 1000}, ok=lambda d: d is True)
check("monitor/consumerMonitorConfigByGroupName.query", "GET",
      "/monitor/consumerMonitorConfigByGroupName.query", {"consumeGroupName": GROUP},
      ok=lambda d: d["minCount"] == 1)

# Producer page.
check("producer/producerConnection.query", "GET", "/producer/producerConnection.query",
      {"producerGroup": PRODUCER, "topic": TOPIC}, ok=lambda d: d["connectionSet"])

# Message page.
day_ago = now_ms - 86_400_000
check("message/queryMessageByTopicAndKey.query", "GET", "/message/queryMessageByTopicAndKey.query",
      {"topic": TOPIC, "key": MSG_KEY}, ok=lambda d: any(m["msgId"] == MSG_ID for m in d))
check("message/queryMessageByTopic.query", "GET", "/message/queryMessageByTopic.query",
      {"topic": TOPIC, "begin": day_ago, "end": now_ms + 60_000}, ok=lambda d: len(d) >= 100)
check("message/queryMessagePageByTopic.query", "POST", "/message/queryMessagePageByTopic.query",
      body={"topic": TOPIC, "begin": day_ago, "end": now_ms + 60_000, "pageNum": 1,
            "pageSize": 20, "taskId": ""},
      ok=lambda d: d["page"]["content"] and d["page"]["totalElements"] >= 100)
check("message/viewMessage.query", "GET", "/message/viewMessage.query",
      {"msgId": MSG_ID, "topic": TOPIC},
      ok=lambda d: d["messageView"]["msgId"] == MSG_ID
      and any(t["consumerGroup"] == GROUP and t["trackType"] == "CONSUMED"
              for t in d["messageTrackList"]))
check("message/consumeMessageDirectly.do", "POST", "/message/consumeMessageDirectly.do",
      {"topic": TOPIC, "consumerGroup": GROUP, "msgId": MSG_ID, "clientId": client_id},
      ok=lambda d: d["consumeResult"] == "CR_SUCCESS")
check("messageTrace/viewMessage.query", "GET", "/messageTrace/viewMessage.query",
      {"msgId": MSG_ID, "topic": TOPIC}, ok=lambda d: d["messageView"]["msgId"] == MSG_ID)
check("messageTrace/viewMessageTraceDetail.query", "GET",
      "/messageTrace/viewMessageTraceDetail.query", {"msgId": MSG_ID}, ok=lambda d: len(d) >= 2)
check("messageTrace/viewMessageTraceGraph.query", "GET",
      "/messageTrace/viewMessageTraceGraph.query", {"msgId": MSG_ID, "traceTopic": TRACE_TOPIC},
      ok=lambda d: d["producerNode"] and d["subscriptionNodeList"])
check("dlqMessage/queryDlqMessageByConsumerGroup.query", "POST",
      "/dlqMessage/queryDlqMessageByConsumerGroup.query",
      body={"topic": "%DLQ%" + GROUP, "begin": day_ago, "end": now_ms + 60_000, "pageNum": 1,
            "pageSize": 20, "taskId": ""}, ok=lambda d: d["page"] is not None)

# Ops and proxy pages.
check("ops/homePage.query", "GET", "/ops/homePage.query", ok=lambda d: d["namesvrAddrList"])
check("ops/rocketMqStatus.query", "GET", "/ops/rocketMqStatus.query", ok=lambda d: d)
check("rocketmq/nsaddr.query", "GET", "/rocketmq/nsaddr.query", ok=lambda d: d)
check("proxy/homePage.query", "GET", "/proxy/homePage.query", ok=lambda d: d["proxyAddrList"])

# The changes the pages make.
check("topic/sendTopicMessage.do", "POST", "/topic/sendTopicMessage.do",
      body={"topic": TOPIC, "key": "dash-send", "tag": "TagD", "messageBody": "from the page",
            "traceEnabled": False}, ok=lambda d: d["sendStatus"] == "SEND_OK")
check("topic/createOrUpdate.do", "POST", "/topic/createOrUpdate.do",
      body={"clusterNameList": ["DefaultCluster"], "brokerNameList": [], "topicName": "DashTemp",
            "writeQueueNums": 4, "readQueueNums": 4, "perm": 6, "order": False,
            "messageType": "NORMAL"}, ok=lambda d: d is True)
check("consumer/createOrUpdate.do", "POST", "/consumer/createOrUpdate.do",
      body={"clusterNameList": [], "brokerNameList": broker_names,
            "subscriptionGroupConfig": {"groupName": "DashTempGroup", "consumeEnable": True,
                                        "retryQueueNums": 1, "retryMaxTimes": 16}},
      ok=lambda d: d is True)
check("consumer/resetOffset.do", "POST", "/consumer/resetOffset.do",
      body={"consumerGroupList": [OFFLINE], "topic": TOPIC, "resetTime": now_ms - 3_600_000,
            "force": True}, ok=lambda d: d[OFFLINE]["status"])
check("consumer/skipAccumulate.do", "POST", "/consumer/skipAccumulate.do",
      body={"consumerGroupList": [OFFLINE], "topic": TOPIC, "resetTime": -1, "force": True},
      ok=lambda d: d[OFFLINE]["status"])
check("consumer/deleteSubGroup.do", "POST", "/consumer/deleteSubGroup.do",
      body={"groupName": "DashTempGroup", "brokerNameList": broker_names},
      ok=lambda d: d is True)
check("topic/deleteTopicByBroker.do", "POST", "/topic/deleteTopicByBroker.do",
      {"brokerName": broker_names[-1] if broker_names else "", "topic": "DashTemp"},
      ok=lambda d: d is True)
check("topic/deleteTopic.do", "POST", "/topic/deleteTopic.do", {"topic": "DashTemp"},
      ok=lambda d: d is True)

# ACL page (ACL 2.0: users and policies), as the page calls it: the cluster and the broker
# chosen in its selectors (the first of each); its delete of a policy names the broker as
# `brokerAddress`, which the backend does not read, so it goes to every broker of the
# cluster. Each call goes to every broker of the selection, and the lists keep what all of
# them answer alike. The user, a normal one, has a policy on a topic and on a group named
# after it, from one source address.
cluster_name = next(iter(cluster["clusterInfo"]["clusterAddrTable"]), "") if cluster else ""
page = {"brokerName": broker_names[0] if broker_names else "", "clusterName": cluster_name}
USER, PASSWORD = "dashapp", "dash-app-secret-1"
SUBJECT = "User:" + USER
TOPIC_RES, GROUP_RES = "Topic:" + TOPIC, "Group:dashapp-readers"


def user_row(d, name):
    rows = [u for u in d if u["username"] == name]
    return rows[0] if len(rows) == 1 else None


def acl_rows(d):
    """The page's rows of SUBJECT's ACL: (policyType, resource) -> entry."""
    return {(p["policyType"], e["resource"]): e for a in d if a["subject"] == SUBJECT
            for p in a["policies"] for e in p["entries"]}


def one_acl(d):
    return len([a for a in d if a["subject"] == SUBJECT]) == 1


check("acl/createUser.do", "POST", "/acl/createUser.do",
      body=dict(page, userInfo={"username": USER, "password": PASSWORD, "userType": "Normal",
                                "userStatus": "enable"}), ok=lambda d: d is True)
check("acl/users.query", "GET", "/acl/users.query", page,
      ok=lambda d: user_row(d, USER) == {"username": USER, "password": PASSWORD,
                                         "userType": "Normal", "userStatus": "enable"}
      and user_row(d, ADMIN)["userType"] == "Super")
check("acl/users.query (cluster)", "GET", "/acl/users.query", {"clusterName": cluster_name},
      ok=lambda d: user_row(d, USER) and user_row(d, ADMIN))
check("acl/createAcl.do", "POST", "/acl/createAcl.do",
      body=dict(page, subject=SUBJECT, policies=[{
          "policyType": "Custom",
          "entries": [{"resource": [TOPIC_RES, GROUP_RES], "actions": ["Pub", "Sub"],
                       "sourceIps": ["127.0.0.1"], "decision": "Allow"}]}]),
      ok=lambda d: d is True)
check("acl/acls.query", "GET", "/acl/acls.query", page,
      ok=lambda d: one_acl(d) and acl_rows(d) == {
          ("Custom", r): {"resource": r, "actions": ["Pub", "Sub"], "sourceIps": ["127.0.0.1"],
                          "decision": "Allow"} for r in (TOPIC_RES, GROUP_RES)})
# The search box: an ACL whose subject or one of whose resources holds the text, once, whole.
check("acl/acls.query (search)", "GET", "/acl/acls.query", dict(page, searchParam=USER),
      ok=lambda d: len(d) == 1 and set(acl_rows(d)) == {("Custom", TOPIC_RES),
                                                        ("Custom", GROUP_RES)})
check("acl/acls.query (cluster)", "GET", "/acl/acls.query", {"clusterName": cluster_name},
      ok=lambda d: one_acl(d) and len(acl_rows(d)) == 2)
# The page's edit of a row: that resource's entry, the others left as they are.
check("acl/updateAcl.do", "POST", "/acl/updateAcl.do",
      body=dict(page, subject=SUBJECT, policies=[{
          "policyType": "Custom",
          "entries": [{"resource": [TOPIC_RES], "actions": ["Pub"], "sourceIps": [],
                       "decision": "Deny"}]}]), ok=lambda d: d is True)
check("acl/acls.query (updated)", "GET", "/acl/acls.query", page,
      ok=lambda d: (lambda rows: rows[("Custom", TOPIC_RES)]["decision"] == "Deny"
                    and rows[("Custom", TOPIC_RES)]["actions"] == ["Pub"]
                    and rows[("Custom", GROUP_RES)]["decision"] == "Allow")(acl_rows(d)))
check("acl/updateUser.do", "POST", "/acl/updateUser.do",
      body=dict(page, userInfo={"username": USER, "password": PASSWORD + "-new",
                                "userType": "Normal", "userStatus": "disable"}),
      ok=lambda d: d is True)
check("acl/users.query (updated)", "GET", "/acl/users.query", page,
      ok=lambda d: user_row(d, USER)["userStatus"] == "disable"
      and user_row(d, USER)["password"] == PASSWORD + "-new")
check("acl/deleteAcl.do (resource)", "DELETE", "/acl/deleteAcl.do",
      {"brokerAddress": page["brokerName"], "subject": SUBJECT, "resource": TOPIC_RES,
       "clusterName": cluster_name}, ok=lambda d: d is True)
check("acl/acls.query (resource deleted)", "GET", "/acl/acls.query", page,
      ok=lambda d: set(acl_rows(d)) == {("Custom", GROUP_RES)})
check("acl/deleteAcl.do", "DELETE", "/acl/deleteAcl.do",
      {"brokerAddress": page["brokerName"], "subject": SUBJECT, "clusterName": cluster_name},
      ok=lambda d: d is True)
check("acl/acls.query (deleted)", "GET", "/acl/acls.query", {"clusterName": cluster_name},
      ok=lambda d: isinstance(d, list) and not acl_rows(d))
check("acl/deleteUser.do", "DELETE", "/acl/deleteUser.do",
      dict(page, username=USER), ok=lambda d: d is True)
check("acl/users.query (deleted)", "GET", "/acl/users.query", page,
      ok=lambda d: user_row(d, ADMIN) and not any(u["username"] == USER for u in d))

if os.environ.get("DASHBOARD_ANSWERS"):
    with open(os.environ["DASHBOARD_ANSWERS"], "w") as f:
        json.dump(answers, f, indent=1)
width = max(len(r[0]) for r in results)
for name, status, good, note in results:
    print("%-*s  %3s  %-4s %s" % (width, name, status, "data" if good else "NO", note))
n = sum(1 for r in results if r[2])
print("%d of %d answer with data" % (n, len(results)))
sys.exit(0 if n == len(results) else 1)
