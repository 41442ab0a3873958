#!/usr/bin/env python3
"""The matrix's checks through kcat (Debian 12: kcat 1.7.1 on librdkafka 2.0.2), every kcat
run bounded by a timeout:

    python3 kcat_checks.py 127.0.0.1:9092 path/to/sluice

kcat has no admin commands beyond `-L` metadata, so topics are created with the `sluice` CLI
(not a check) and the admin checks other than describe-topic are not kcat's. Transactions: with
`-X transactional.id=...` kcat sends all its input in one transaction, committed when the input
ends and aborted when kcat is interrupted (SIGINT).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
from checks import Deadline, check, expect, name, watchdog  # noqa: E402

BOOTSTRAP, SLUICE = sys.argv[1], sys.argv[2]
watchdog(int(os.environ.get("COMPAT_DEADLINE", "150")))
CLIENT = "kcat"
version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
print("CLIENT " + next(line for line in version.splitlines() if line.startswith("Version")), flush=True)

TOPIC = name("main", CLIENT)
GROUP_TOPIC = name("grouped", CLIENT)
GROUP = name("group", CLIENT)
TXN_TOPIC = name("txn", CLIENT)


def kcat(*args, stdin=None, timeout=30, stderr=None):
    """Runs kcat to completion; returns stdout (and stderr's lines are added to the `stderr`
    list if given); a non-zero exit or a timeout raises with stderr."""
    argv = ["kcat", "-b", BOOTSTRAP, *args]
    try:
        r = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise TimeoutError(f"kcat {' '.join(args)} still running after {timeout}s; stderr: {err[-600:]}")
    sys.stderr.write(r.stderr)
    if stderr is not None:
        stderr.extend(r.stderr.splitlines())
    expect(r.returncode == 0, f"kcat {' '.join(args)} exited {r.returncode}: {r.stderr[-600:]}")
    return r.stdout


def create(topic):
    r = subprocess.run([SLUICE, "topic", "create", "-b", BOOTSTRAP, topic], capture_output=True,
                       text=True, timeout=30)
    expect(r.returncode == 0, f"sluice topic create {topic}: {r.stderr}")


def end_offset(topic):
    """The partition's end offset through kcat -Q (ListOffsets, timestamp -1 = latest)."""
    out = kcat("-Q", "-t", f"{topic}:0:-1").split()
    return int(out[-1])


def lines(out):
    return [line.split(" ", 1) for line in out.splitlines() if line]


def produce(topic, records, *extra):
    kcat("-P", "-t", topic, "-p", "0", "-K", ":", *extra,
         stdin="".join(f"{k}:{v}\n" for k, v in records))


def read_all(topic, *extra):
    """Consumes partition 0 from the beginning to its end (-e); returns [(offset, value)].
    librdkafka's default isolation.level is read_committed."""
    out = kcat("-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n", *extra)
    return [(int(o), v) for o, v in lines(out)]


def admin_describe_topic():
    everything = json.loads(kcat("-L", "-J"))
    expect(TOPIC in [t["topic"] for t in everything["topics"]], f"{TOPIC} missing from -L")
    md = json.loads(kcat("-L", "-J", "-t", TOPIC))
    brokers = [b["id"] for b in md["brokers"]]
    topics = md["topics"]
    expect([t["topic"] for t in topics] == [TOPIC], f"topics {topics}")
    expect(not topics[0].get("error"), f"topic error {topics[0].get('error')}")
    partitions = topics[0]["partitions"]
    expect([p["partition"] for p in partitions] == [0], f"partitions {partitions}")
    expect(partitions[0]["leader"] in brokers, f"leader {partitions[0]['leader']}, brokers {brokers}")


def produce_plain():
    produce(TOPIC, [(f"k{i}", f"plain-{i}") for i in range(10)])
    offset = end_offset(TOPIC)
    expect(offset == 10, f"end offset {offset} after 10 records (kcat -Q), want 10")


def produce_idempotent():
    produce(TOPIC, [(f"k{i}", f"idem-{i}") for i in range(10)], "-X", "enable.idempotence=true")
    offset = end_offset(TOPIC)
    expect(offset == 20, f"end offset {offset} after 20 records (kcat -Q), want 20")


def produce_compressed():
    """Each codec's batches leave kcat compressed (librdkafka's `-d msg` log names the codec of
    every ProduceRequest batch) and come back intact. librdkafka before 2.11.1 compresses with
    gzip, snappy and lz4 only when the broker's ApiVersions lists Produce v0 (librdkafka
    #4956); Kafka 4 lists Produce 0-N for that reason although it refuses v0-2 (KAFKA-18659)."""
    topic = name("compressed", CLIENT)
    create(topic)
    problems, want = [], []
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        values = [f"{codec}-{i}-" + "compressible " * 20 for i in range(5)]
        want += values
        log = []
        kcat("-P", "-t", topic, "-p", "0", "-z", codec, "-d", "msg",
             stdin="".join(v + "\n" for v in values), stderr=log)
        log = "\n".join(log)
        batches = re.findall(r"Produce MessageSet with \d+ message\(s\) \([^)]*, (\w+)\)", log)
        if not batches or any(b != codec for b in batches):
            said = re.search(r"Broker does not support compression type \w+", log)
            problems.append(f"{codec} batches sent as {'/'.join(sorted(set(batches))) or '?'}"
                            + (f" (librdkafka: '{said.group(0)}')" if said else ""))
    got = [v for _, v in read_all(topic)]
    expect(got == want, f"read back {len(got)} records, not the {len(want)} produced")
    expect(not problems, "; ".join(problems))


def consume_from_beginning():
    got = read_all(TOPIC)
    want = [(i, f"plain-{i}") for i in range(10)] + [(10 + i, f"idem-{i}") for i in range(10)]
    expect(got == want, f"read {got}, want {want}")


def consume_from_end():
    argv = ["kcat", "-b", BOOTSTRAP, "-C", "-t", TOPIC, "-p", "0", "-o", "end", "-c", "3", "-u",
            "-f", "%o %s\n"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # kcat reports reaching the partition's end once it is positioned there.
        line = ""
        d = Deadline(20)
        while d.left() and "Reached end of topic" not in line:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError(f"kcat exited {proc.returncode} before reaching the end")
        if "Reached end of topic" not in line:
            d.fail("'Reached end of topic' from kcat -o end")
        expect(line.strip().endswith("at offset 20"), f"kcat said {line.strip()!r}, want offset 20")
        produce(TOPIC, [("late", f"late-{i}") for i in range(3)])
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    got = [(int(o), v) for o, v in lines(out)]
    want = [(20 + i, f"late-{i}") for i in range(3)]
    expect(got == want, f"read {got}, want only the 3 records produced after positioning: {want}")


def group_commit_and_resume():
    """kcat -G commits (auto-commit of the offsets it delivered) when it closes after -c."""
    create(GROUP_TOPIC)
    produce(GROUP_TOPIC, [("g", f"g-{i}") for i in range(10)])
    group = ["-G", GROUP, "-X", "auto.offset.reset=earliest", "-f", "%o %s\n"]
    got_a = [(int(o), v) for o, v in lines(kcat(*group, "-c", "4", GROUP_TOPIC, timeout=40))]
    expect(got_a == [(i, f"g-{i}") for i in range(4)], f"A read {got_a}")
    got_b = [(int(o), v) for o, v in lines(kcat(*group, "-e", GROUP_TOPIC, timeout=40))]
    want = [(i, f"g-{i}") for i in range(4, 10)]
    expect(got_b == want, f"B read {got_b}, want exactly {want} (A committed 4)")


def transactions():
    create(TXN_TOPIC)
    produce(TXN_TOPIC, [("c", f"commit-{i}") for i in range(3)],
            "-X", f"transactional.id={name('txn-id', CLIENT)}")
    # An aborted transaction: kcat keeps its transaction open while its input stays open; once
    # its records are in the log (a read_uncommitted reader sees them), SIGINT and the end of
    # the input make it abort. kcat 1.7.1 reads its input in blocking 1024-byte freads (kcat
    # 1.8 polls stdin instead), so each record here is exactly 1024 bytes with its newline:
    # every fread returns one whole record, which kcat then sends.
    aborted = [f"abort-{i}".ljust(1023, ".") for i in range(3)]
    argv = ["kcat", "-b", BOOTSTRAP, "-P", "-t", TXN_TOPIC, "-p", "0", "-X",
            f"transactional.id={name('txn-id-abort', CLIENT)}"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("".join(v + "\n" for v in aborted))
        proc.stdin.flush()
        d = Deadline(20)
        while d.left():
            uncommitted = read_all(TXN_TOPIC, "-X", "isolation.level=read_uncommitted")
            if [v for _, v in uncommitted][3:] == aborted:
                break
            time.sleep(0.2)
        else:
            d.fail("open transaction's records in the log (read_uncommitted)")
        proc.send_signal(signal.SIGINT)
        proc.stdin.close()  # the blocked fread returns; kcat sees the signal and aborts
        proc.stdin = None  # (communicate would flush it)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    sys.stderr.write(err)
    expect("Aborting transaction" in err and proc.returncode == 0,
           f"kcat exited {proc.returncode} without aborting: {err[-400:]}")
    produce(TXN_TOPIC, [("c", f"commit2-{i}") for i in range(3)],
            "-X", f"transactional.id={name('txn-id', CLIENT)}")
    committed = [v for _, v in read_all(TXN_TOPIC, "-X", "isolation.level=read_committed")]
    want = [f"commit-{i}" for i in range(3)] + [f"commit2-{i}" for i in range(3)]
    expect(committed == want, f"read_committed read {committed}, want {want}")
    uncommitted = [v for _, v in read_all(TXN_TOPIC, "-X", "isolation.level=read_uncommitted")]
    expect(len(uncommitted) == 9, f"read_uncommitted read {uncommitted}, want all 9")


def list_offsets_by_time():
    """kcat -Q: offsets for a timestamp (ListOffsets with timestamps), earliest and latest."""
    answers = {ts: int(kcat("-Q", "-t", f"{TOPIC}:0:{ts}").split()[-1])
               for ts in (-2, -1, 0, int(time.time() * 1000) + 3_600_000)}
    want = {-2: 0, -1: 23, 0: 0}
    future = answers.pop(max(answers))
    expect(answers == want, f"offsets {answers}, want {want}")
    expect(future == -1, f"offset for a future timestamp {future}, want -1 (none)")


create(TOPIC)  # not a check: kcat cannot create topics
check("admin_describe_topic", admin_describe_topic)
check("produce", produce_plain)
check("produce_idempotent", produce_idempotent, needs=["produce"])
check("produce_compressed", produce_compressed)
check("consume_from_beginning", consume_from_beginning, needs=["produce_idempotent"])
check("consume_from_end", consume_from_end, needs=["produce_idempotent"])
check("list_offsets_by_time", list_offsets_by_time, needs=["consume_from_end"])
check("group_commit_and_resume", group_commit_and_resume)
check("transactions", transactions)
