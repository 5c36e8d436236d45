"""Decode Confluent-framed records with implementations independent of
outboxd's Go code: fastavro for Avro, protoc (grpcio-tools) and the
protobuf runtime for Protobuf, the jsonschema package for JSON Schema.

Reads JSON lines on stdin, one record each:
  {"format": "avro"|"protobuf"|"json-schema", "schema": TEXT,
   "references": {NAME: TEXT}, "record": BASE64}
and writes one JSON line each:
  {"id": SCHEMA_ID, "value": DECODED} or {"error": TEXT}.
The schema given must be the one the record's id names: the caller looked
it up in the registry.
"""
import base64
import io
import json
import os
import struct
import subprocess
import sys
import tempfile


def header(b):
    if len(b) < 5 or b[0] != 0:
        raise ValueError("no magic byte and schema id")
    return struct.unpack(">I", b[1:5])[0], b[5:]


def varint(b, i):
    shift = result = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if not c & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), i  # zigzag


def avro(schema, refs, body):
    import fastavro
    named = {}
    for text in refs.values():
        fastavro.parse_schema(json.loads(text), named_schemas=named)
    parsed = fastavro.parse_schema(json.loads(schema), named_schemas=named)
    buf = io.BytesIO(body)
    value = fastavro.schemaless_reader(buf, parsed, return_record_name=False)
    if buf.read():
        raise ValueError("bytes left after the Avro value")
    return plain(value)


def plain(v):
    """Avro values as JSON: bytes as code points, decimals and times as
    their text."""
    import datetime
    import decimal
    import uuid
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v


def protobuf(schema, refs, body):
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
    from grpc_tools import protoc
    import grpc_tools
    with tempfile.TemporaryDirectory() as d:
        files = dict(refs)
        files["registered.proto"] = schema
        for name, text in files.items():
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        out = os.path.join(d, "set.pb")
        std = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        if protoc.main(["protoc", "-I" + d, "-I" + std, "--include_imports", "--descriptor_set_out=" + out, "registered.proto"]) != 0:
            raise ValueError("protoc refused the schema")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    fd = pool.FindFileByName("registered.proto")
    n, i = varint(body, 0)
    index = [0]
    if n != 0:
        index = []
        for _ in range(n):
            x, i = varint(body, i)
            index.append(x)
    msgs = list(fd.message_types_by_name.values())  # in the file's order
    md = None
    for x in index:
        md = msgs[x]
        msgs = list(md.nested_types)
    cls = message_factory.GetMessageClass(md)
    m = cls()
    m.ParseFromString(body[i:])
    return json_format.MessageToDict(m, preserving_proto_field_name=True)


def json_schema(schema, refs, body):
    import jsonschema
    value = json.loads(body)
    jsonschema.validate(value, json.loads(schema))
    return value


def main():
    for line in sys.stdin:
        req = json.loads(line)
        try:
            sid, body = header(base64.b64decode(req["record"]))
            fn = {"avro": avro, "protobuf": protobuf, "json-schema": json_schema}[req["format"]]
            out = {"id": sid, "value": fn(req["schema"], req.get("references") or {}, body)}
        except Exception as e:  # reported per record, for the test to show
            out = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
