"""Hand-built Kafka frames, for requests no well-behaved client would send."""

import socket
import struct

from kafka.record.default_records import DefaultRecordBatchBuilder


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def header_v1(api_key, version, correlation_id, client_id="raw-test"):
    return struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


def record_batch(count=3, value=b"v" * 20, compression=0):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i in range(count):
        b.append(i, timestamp=1_000 + i, key=b"k%d" % i, value=value, headers=[])
    return bytes(b.build())


def with_records_section(batch, body):
    """`batch`'s header (count, codec, ...) over another records section; length and CRC fixed."""
    import crc32c
    out = bytearray(batch[:61] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def produce_v3(topic, partition, records, acks=-1, correlation_id=7):
    body = struct.pack(">h", -1)  # transactional id: null
    body += struct.pack(">hi", acks, 10_000)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition) + struct.pack(">i", len(records)) + records
    return frame(header_v1(0, 3, correlation_id) + body)


def parse_produce_v3(payload):
    """-> [(topic, partition, error_code, base_offset)]"""
    at = 4  # correlation id
    out = []
    (topics,) = struct.unpack_from(">i", payload, at)
    at += 4
    for _ in range(topics):
        (n,) = struct.unpack_from(">h", payload, at)
        name = payload[at + 2:at + 2 + n].decode()
        at += 2 + n
        (parts,) = struct.unpack_from(">i", payload, at)
        at += 4
        for _ in range(parts):
            index, error, base, _append_time = struct.unpack_from(">ihqq", payload, at)
            at += 22
            out.append((name, index, error, base))
    return out


class Conn:
    def __init__(self, bootstrap, timeout=10):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)

    def send(self, data):
        self.sock.sendall(data)

    def read_frame(self):
        """The next response frame's payload, or None if the broker closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def closed_by_peer(self):
        """True once the broker has closed the connection (reads EOF within the timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def call(bootstrap, request, timeout=10):
    """Sends one framed request on a new connection; the response payload (after the length)."""
    conn = Conn(bootstrap, timeout=timeout)
    try:
        conn.send(request)
        payload = conn.read_frame()
    finally:
        conn.sock.close()
    assert payload is not None, "the broker closed the connection"
    return payload


def one_partition(payload, at, topic=None):
    """Past a one-topic, one-partition response's topic name and partition count at `at`
    (each an array of one; the name checked when `topic` is given): the offset of the
    partition's entry."""
    (topics,) = struct.unpack_from(">i", payload, at)
    assert topics == 1, topics
    (n,) = struct.unpack_from(">h", payload, at + 4)
    if topic is not None:
        assert payload[at + 6:at + 6 + n].decode() == topic
    at += 4 + 2 + n
    (parts,) = struct.unpack_from(">i", payload, at)
    assert parts == 1, parts
    return at + 4
