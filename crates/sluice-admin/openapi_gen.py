"""Writes openapi.json, the admin API's OpenAPI 3.1 document, beside this script.

Edit this file when the API changes and run `python3 crates/sluice-admin/openapi_gen.py`; the
Rust test tests/routes.rs checks that router and document agree, and the Python API tests
validate every answer against the document.
"""
import json
import sys
from pathlib import Path

E = {"$ref": "#/components/responses/Error"}
def op(summary, ok_code="200", ok_schema=None, params=(), body=None, errors=("400","404"), ok_desc="OK", tag=None):
    o = {"summary": summary, "tags":[tag] if tag else [], "parameters": list(params), "responses": {}}
    if ok_schema is None:
        o["responses"][ok_code] = {"description": ok_desc}
    else:
        o["responses"][ok_code] = {"description": ok_desc, "content": {"application/json": {"schema": ok_schema}}}
    for e in errors:
        o["responses"][e] = E
    o["responses"]["401"] = E
    if body:
        o["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if not o["parameters"]: del o["parameters"]
    return o
def ref(n): return {"$ref": f"#/components/schemas/{n}"}
def arr(s): return {"type":"array","items":s}
def path_param(n, t="string", d=""): return {"name": n, "in":"path","required":True,"schema":{"type":t},"description":d}
def q(n, t="string", d="", enum=None):
    s={"type":t}
    if enum: s["enum"]=enum
    return {"name":n,"in":"query","required":False,"schema":s,"description":d}
T = path_param("topic", d="topic name")
P = path_param("partition", "integer", "partition index")
G = path_param("group", d="consumer group id")
N = path_param("name", d="registered cluster name")
U = path_param("name", d="the user name")
I = {"type":"integer"}; S={"type":"string"}; NUM={"type":"number"}; B={"type":"boolean"}
def obj(props, required=None, extra=False):
    o={"type":"object","properties":props}
    if required: o["required"]=required
    if not extra: o["additionalProperties"]=False
    return o
nullable=lambda s: {"oneOf":[s,{"type":"null"}]}
schemas = {
 "Error": obj({"error":S},["error"]),
 "TrafficPoint": obj({"t_ms":I,"produce_msgs_per_s":NUM,"produce_bytes_per_s":NUM,"consume_msgs_per_s":NUM,"consume_bytes_per_s":NUM,"produce_p99_us":{**nullable(I),"description":"on the node answering, not summed"},"nodes_counted":{"type":"integer","description":"nodes whose traffic the rates sum"},"nodes_missing":{"type":"integer","description":"live nodes whose traffic this point leaves out (no answer in time, just restarted, or an older version)"}}),
 "Node": obj({"id":I,"kafka_address":S,"admin_address":nullable(S),"rack":nullable(S),"roles":arr({"type":"string","enum":["broker","voter","controller"]}),
     "status":{"type":"string","enum":["online","degraded","fenced","unreachable"],"description":"fenced: the controller has not heard from the node; unreachable: alive in the metadata but it did not answer this node"},
     "version":nullable(S),"uptime_ms":nullable(I),"data_bytes":nullable(I),"disk_free_bytes":nullable(I),"disk_total_bytes":nullable(I),"connections":nullable(I),"error":nullable(S)}),
 "Overview": obj({"cluster_id":S,"controller_id":I,"nodes":arr(ref("Node")),"topics":I,"partitions":I,"under_replicated_partitions":I,"offline_partitions":I,"groups":{"type":"integer","description":"in a cluster: of every node that answered"},"connections":{"type":"integer","description":"in a cluster: summed over the nodes that answered"},"traffic":nullable(ref("TrafficPoint"))}),
 "History": obj({"interval_ms":I,"points":arr(ref("TrafficPoint"))}),
 "OutboxRelay": obj({"slot":S,"source":{"type":"string","description":"the database read: scheme, host, port, database"},
     "state":{"type":"string","enum":["starting","standby","active","retrying","stopped","failed"],"description":"active: this instance publishes; standby: another instance holds the lease"},
     "rows":{"type":"integer","description":"rows this instance published"},"txns":I,"batches":I,
     "position":{"type":"string","description":"LSN (PostgreSQL) or binlog file:offset (MySQL) past the last published transaction"},
     "lag_ms":{"type":"number","description":"the last batch's database commit to its Sluice commit"},"lag_bytes":I,"pending_rows":I,"activations":I,"last_error":nullable(S),
     "instance":{"type":"string","description":"HOST:PID of the process running this instance"},
     "local":{"type":"boolean","description":"this broker runs it ([outbox] in its settings file): its figures are live; otherwise they are its last report on the sluice-outbox-status topic"},
     "started_at_ms":{"type":"integer","description":"when that process started (ms since the epoch): with instance, tells apart two processes with one host name and PID"},
     "silent":{"type":"boolean","description":"no report for over 10 s and not stopped or failed: the instance was killed or cut off (instances silent for 10 minutes are no longer listed)"},
     "report_age_ms":{"type":"integer","description":"how old its last report is (0 when local)"}},
     ["slot","source","state","rows","position","instance","started_at_ms","local","silent","report_age_ms"]),
 "TopicSummary": obj({"name":S,"internal":B,"partitions":I,"replication_factor":I,"size_bytes":I,"messages":I,"produce_msgs_per_s":NUM,"produce_bytes_per_s":NUM}),
 "ConfigValue": obj({"name":S,"value":S,"source":{"type":"string","enum":["topic","broker","default"]},"doc":S}),
 "PartitionRow": obj({"partition":I,"leader":{"type":"integer","description":"-1 while offline"},"replicas":arr(I),"in_sync_replicas":arr(I),
     "log_start_offset":nullable(I),"log_end_offset":nullable(I),"high_watermark":nullable(I),"size_bytes":nullable(I),"segments":nullable(I),"offline":B,
     "follower_lag":arr(obj({"node":I,"in_sync":B,"records":nullable(I),"ms":I}))}),
 "TopicDetail": None,
 "CreateTopic": obj({"name":S,"partitions":I,"replication_factor":I,"replicas":{**arr(arr(I)),"description":"each partition's replicas (node ids, the preferred leader first) instead of partitions and replication_factor, as kafka-topics.sh --replica-assignment"},"configs":{"type":"object","additionalProperties":S}},["name"]),
 "SetConfigs": obj({"configs":{"type":"object","additionalProperties":S,"description":"the topic's overrides after the change; configs left out return to their defaults"}},["configs"]),
 "AddPartitions": obj({"count":{"type":"integer","description":"the new total"},"replicas":{**arr(arr(I)),"description":"the new partitions' replicas, one list of node ids per new partition; placed by the controller when absent"}},["count"]),
 "DeleteRecords": obj({"partition":{"type":"integer","description":"one partition; every partition when absent"},"before_offset":{"type":"integer","minimum":-1,"description":"records below this offset go; -1: up to the high watermark (required without a partition)"},"timeout_ms":{"type":"integer","minimum":0,"maximum":60000,"description":"in a cluster, how long to wait for the in-sync followers to delete them too (default 30000); 504 after it"}},["before_offset"]),
 "ShownBytes": obj({"base64":S,"text":nullable(S),"size":I,"truncated":B}),
 "Record": obj({"offset":I,"timestamp":I,"timestamp_type":{"type":"string","enum":["CreateTime","LogAppendTime"]},"key":nullable(ref("ShownBytes")),"value":nullable(ref("ShownBytes")),"headers":arr(obj({"key":S,"value":nullable(ref("ShownBytes"))}))}),
 "BrowseResponse": obj({"topic":S,"partition":I,"log_start_offset":I,"high_watermark":I,"records":arr(ref("Record"))}),
 "ProduceRequest": obj({"partition":I,"key":S,"value":S,"headers":arr(obj({"key":S,"value":S},["key"])),"encoding":{"type":"string","enum":["text","base64"]}}),
 "ProduceResponse": obj({"partition":I,"offset":I}),
 "GroupRow": obj({"group":S,"state":S,"protocol_type":S,"members":I,"lag":I,
     "node":{"type":"integer","description":"the node coordinating the group (in a cluster, every node lists every group)"},
     "admin_address":{"oneOf":[S,{"type":"null"}],"description":"that node's admin address: the group's page is on its console"}}),
 "GroupStatus": obj({"group":S,"state":S,"protocol_type":S,"protocol":nullable(S),"generation":I,
     "members":arr(obj({"member_id":S,"instance_id":nullable(S),"client_id":S,"client_host":S,"assignment":arr({"type":"array","prefixItems":[S,arr(I)]})})),
     "offsets":arr(obj({"topic":S,"partition":I,"committed_offset":I,"log_end_offset":nullable(I),"lag":nullable(I)}))}),
 "LagPoint": obj({"t_ms":I,"lag":I}),
 "ResetRequest": obj({"topic":S,"partitions":arr(I),"to":{"type":"string","enum":["earliest","latest","offset","timestamp","shift"]},"value":I,"dry_run":B},["topic","to"]),
 "ResetResponse": obj({"dry_run":B,"changes":arr(obj({"topic":S,"partition":I,"current_offset":nullable(I),"new_offset":I}))}),
 "Cluster": obj({"name":S,"admin_url":nullable(S),"local":B,"has_token":B}),
 "AddCluster": obj({"name":S,"admin_url":S,"token":S},["name","admin_url"]),
 "UserRow": obj({"name":S,"mechanisms":arr(S)}),
 "NewUser": obj({"name":S,"password":{"type":"string","minLength":8}},["name","password"]),
 "Acl": obj({"resource_type":{"type":"string","enum":["topic","group","cluster","transactional-id"]},"resource_name":S,
     "pattern_type":{"type":"string","enum":["literal","prefixed"]},"principal":{"type":"string","description":"User:NAME or User:*"},
     "host":{"type":"string","description":"an IP address or * (default)"},
     "operation":{"type":"string","enum":["All","Read","Write","Create","Delete","Alter","Describe","ClusterAction","DescribeConfigs","AlterConfigs","IdempotentWrite"]},
     "permission":{"type":"string","enum":["Allow","Deny"]}},["resource_type","resource_name","pattern_type","principal","operation","permission"]),
}
schemas["TopicDetail"] = obj({**schemas["TopicSummary"]["properties"], "id":S,"configs":arr(ref("ConfigValue")),"partition_table":arr(ref("PartitionRow"))})
paths = {
 "/health": {"get": op("Liveness", ok_schema=obj({"status":S}), errors=(), tag="node")},
 "/metrics": {"get": {**op("Prometheus metrics (OpenMetrics text)", errors=(), tag="node"), "responses": {"200":{"description":"OpenMetrics text","content":{"application/openmetrics-text":{"schema":S}}}, "401":E}}},
 "/api/openapi.json": {"get": op("This document", ok_schema={"type":"object"}, errors=(), tag="node")},
 "/api/status": {"get": op("This node and its topics' partitions", ok_schema={"type":"object"}, errors=(), tag="node")},
 "/api/overview": {"get": op("The cluster at a glance", ok_schema=ref("Overview"), errors=(), tag="overview")},
 "/api/overview/history": {"get": op("Traffic of the last 15 minutes, one point a second", ok_schema=ref("History"), errors=(), tag="overview")},
 "/api/outbox": {"get": op("Every outbox relay instance: the ones this broker runs, live, and every other one (standalone or in another broker) from its last status report", ok_schema=arr(ref("OutboxRelay")), errors=(), tag="overview")},
 "/api/topics": {
    "get": op("List topics", ok_schema=arr(ref("TopicSummary")), errors=(), tag="topics"),
    "post": op("Create a topic", "201", ref("TopicDetail"), body=ref("CreateTopic"), errors=("400","409","415"), ok_desc="Created", tag="topics")},
 "/api/topics/{topic}": {
    "get": op("Describe a topic: configs and partition table", ok_schema=ref("TopicDetail"), params=[T], errors=("404",), tag="topics"),
    "delete": op("Delete a topic (confirm with its name)", "204", params=[T, {**q("confirm", d="must equal the topic name"), "required":True}], errors=("400","404"), ok_desc="Deleted", tag="topics")},
 "/api/topics/{topic}/configs": {"put": op("Replace a topic's config overrides", ok_schema=ref("TopicDetail"), params=[T], body=ref("SetConfigs"), errors=("400","404","415"), tag="topics")},
 "/api/topics/{topic}/delete-records": {"post": op("Delete a topic's records below an offset (moves the log start, as Kafka's DeleteRecords)", ok_schema=ref("TopicDetail"), params=[T], body=ref("DeleteRecords"), errors=("400","404","409","415","504"), tag="topics")},
 "/api/topics/{topic}/partitions": {"post": op("Grow a topic's partition count", ok_schema=ref("TopicDetail"), params=[T], body=ref("AddPartitions"), errors=("400","404","415"), tag="topics")},
 "/api/topics/{topic}/partitions/{partition}/messages": {"get": op("Browse a partition's records", ok_schema=ref("BrowseResponse"), params=[T,P,
      q("from", d="where to start (default newest)", enum=["oldest","newest","offset","timestamp"]),
      q("value","integer","the offset or time (ms) for from=offset|timestamp"),
      q("order", d="default newest_first", enum=["newest_first","oldest_first"]),
      q("limit","integer","1..500, default 50 (a page also stops before 8 MiB of shown bytes)")], errors=("400","404","503"), tag="messages")},
 "/api/topics/{topic}/messages": {"post": op("Produce one record; answered once committed, as an acks=all produce (503: too few replicas in sync or no leader; 504: not committed within 30 s)", "201", ref("ProduceResponse"), params=[T], body=ref("ProduceRequest"), errors=("400","404","415","503","504"), ok_desc="Written", tag="messages")},
 "/api/groups": {"get": op("List consumer groups with their total lag", ok_schema=arr(ref("GroupRow")), errors=(), tag="groups")},
 "/api/groups/{group}": {"get": op("A group's members, assignments and per-partition lag", ok_schema=ref("GroupStatus"), params=[G], errors=("404",), tag="groups")},
 "/api/groups/{group}/lag-history": {"get": op("A group's total lag over the last 15 minutes", ok_schema=arr(ref("LagPoint")), params=[G], errors=("404",), tag="groups")},
 "/api/groups/{group}/reset-offsets": {"post": op("Reset a group's offsets (dry_run previews); the group must have no members", ok_schema=ref("ResetResponse"), params=[G], body=ref("ResetRequest"), errors=("400","404","409","415"), tag="groups")},
 "/api/users": {
    "get": op("SASL/SCRAM users and their mechanisms (never keys)", ok_schema=arr(ref("UserRow")), errors=(), tag="security"),
    "post": op("Create a user or set its password (SCRAM-SHA-256 and -512, 8192 iterations)", "201", body=ref("NewUser"), errors=("400","415"), ok_desc="Created", tag="security")},
 "/api/users/{name}": {"delete": op("Delete a user", "204", params=[U], errors=("404",), ok_desc="Deleted", tag="security")},
 "/api/acls": {
    "get": op("Every ACL", ok_schema=arr(ref("Acl")), errors=(), tag="security"),
    "post": op("Create an ACL (409 while the authorizer is off)", "201", ref("Acl"), body=ref("Acl"), errors=("400","409","415"), ok_desc="Created", tag="security"),
    "delete": op("Delete exactly this ACL", "204", body=ref("Acl"), errors=("400","404","409","415"), ok_desc="Deleted", tag="security")},
 "/api/clusters": {
    "get": op("This cluster and the registered ones", ok_schema=arr(ref("Cluster")), errors=(), tag="clusters"),
    "post": op("Register another cluster by its admin address", "201", arr(ref("Cluster")), body=ref("AddCluster"), errors=("400","409","415"), ok_desc="Registered", tag="clusters")},
 "/api/clusters/{name}": {"delete": op("Forget a registered cluster", "204", params=[N], errors=("404",), ok_desc="Removed", tag="clusters")},
 "/api/clusters/{name}/proxy/{path}": {m: op(f"Forward a {m.upper()} to the registered cluster's admin port (path is e.g. api/topics)", params=[N, path_param("path", d="the path on the other cluster, without the leading /")], ok_schema={}, errors=("404","502"), ok_desc="The other cluster's answer", tag="clusters") for m in ("get","post","put","delete")},
}
doc = {"openapi":"3.1.0","info":{"title":"Sluice admin API","version":"0.1.0","description":"The JSON API behind the Sluice web console. Errors are JSON {\"error\": message} with a 4xx/5xx status. When the broker runs with an admin token, every call except /health needs 'Authorization: Bearer <token>' or HTTP basic with a SCRAM user (over HTTPS or from loopback; with the authorizer on, topic and group calls need the operation their Kafka API needs (Describe, Read, Write, Delete, AlterConfigs, Alter, Create; listings show only what one may Describe) and other calls Describe on the cluster to read, Alter to change)."},
  "components":{"schemas":schemas,"responses":{"Error":{"description":"An error","content":{"application/json":{"schema":ref("Error")}}}},
     "securitySchemes":{"adminToken":{"type":"http","scheme":"bearer"},"scramUser":{"type":"http","scheme":"basic"}}},
  "security":[{"adminToken":[]},{"scramUser":[]},{}],
  "paths":paths}
text = json.dumps(doc, indent=1) + "\n"
target = Path(__file__).with_name("openapi.json")
if "--check" in sys.argv:
    sys.exit(0 if target.read_text() == text else "openapi.json is stale: run openapi_gen.py")
target.write_text(text)
