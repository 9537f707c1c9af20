#!/usr/bin/python3
"""Independent reader of TensorBoard event files (no tensorflow / tensorboard package).

    tb_event_check.py EVENTS_FILE [EXPECTED.json]

Reads every TFRecord (uint64 length, masked CRC32C of the length, data, masked CRC32C of the
data), checks both CRCs with its own bitwise CRC32C, decodes each Event protobuf by hand and
prints {"file_version": ..., "scalars": [[tag, step, value], ...], "texts": [[tag, step, text], ...],
"wall_times_increasing": bool} as JSON. With EXPECTED.json (the same keys, any subset), exits 1
when the file differs from it. Exits 2 on a broken file (CRC, framing or protobuf), naming the
record and byte offset. Used by tests/loggers_test.cpp.
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class Broken(Exception):
    pass


def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise Broken("varint runs past the message end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise Broken("varint longer than 10 bytes")


def fields(buf):
    """(field number, wire type, value) of a protobuf message; value is int, float bytes or bytes."""
    pos, out = 0, []
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise Broken(f"unsupported wire type {wire} for field {field}")
        if pos > len(buf):
            raise Broken(f"field {field} runs past the message end")
        out.append((field, wire, value))
    return out


def decode_value(buf, step, result):
    tag, simple, text, plugin = None, None, None, None
    for f, w, v in fields(buf):
        if f == 1 and w == 2:
            tag = v.decode("utf-8")
        elif f == 2 and w == 5:
            simple = struct.unpack("<f", v)[0]
        elif f == 9 and w == 2:  # SummaryMetadata.plugin_data.plugin_name
            for f2, w2, v2 in fields(v):
                if f2 == 1 and w2 == 2:
                    for f3, w3, v3 in fields(v2):
                        if f3 == 1 and w3 == 2:
                            plugin = v3.decode("utf-8")
        elif f == 8 and w == 2:  # TensorProto
            dtype, strings = None, []
            for f2, w2, v2 in fields(v):
                if f2 == 1 and w2 == 0:
                    dtype = v2
                elif f2 == 8 and w2 == 2:
                    strings.append(v2.decode("utf-8"))
            if dtype != 7 or len(strings) != 1:
                raise Broken(f"value {tag!r}: expected one DT_STRING, got dtype {dtype} x{len(strings)}")
            text = strings[0]
    if simple is not None:
        result["scalars"].append([tag, step, simple])
    elif text is not None:
        if plugin != "text":
            raise Broken(f"value {tag!r}: text tensor without the text plugin ({plugin!r})")
        result["texts"].append([tag, step, text])
    else:
        raise Broken(f"value {tag!r} has neither simple_value nor tensor")


def read_events(path):
    data = open(path, "rb").read()
    result = {"file_version": None, "scalars": [], "texts": [], "wall_times_increasing": True}
    pos, index, last_wall = 0, 0, 0.0
    while pos < len(data):
        where = f"{path}: record {index} at byte {pos}"
        if pos + 12 > len(data):
            raise Broken(f"{where}: truncated header")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(crc32c(header)) != length_crc:
            raise Broken(f"{where}: length CRC mismatch")
        start = pos + 12
        if start + length + 4 > len(data):
            raise Broken(f"{where}: truncated data ({length} bytes announced)")
        payload = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if masked(crc32c(payload)) != data_crc:
            raise Broken(f"{where}: data CRC mismatch")
        try:
            wall, step, summary = None, 0, None
            for f, w, v in fields(payload):
                if f == 1 and w == 1:
                    wall = struct.unpack("<d", v)[0]
                elif f == 2 and w == 0:
                    step = v - (1 << 64) if v >= 1 << 63 else v
                elif f == 3 and w == 2:
                    if index != 0:
                        raise Broken("file_version after the first record")
                    result["file_version"] = v.decode("utf-8")
                elif f == 5 and w == 2:
                    summary = v
            if wall is None:
                raise Broken("no wall_time")
            if wall < last_wall:
                result["wall_times_increasing"] = False
            last_wall = wall
            if index == 0 and result["file_version"] is None:
                raise Broken("the first record is not file_version")
            if summary is not None:
                for f, w, v in fields(summary):
                    if f == 1 and w == 2:
                        decode_value(v, step, result)
        except Broken as e:
            raise Broken(f"{where}: {e}") from None
        pos = start + length + 4
        index += 1
    return result


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    try:
        got = read_events(sys.argv[1])
    except Broken as e:
        print(f"broken event file: {e}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(got))
    if len(sys.argv) == 3:
        expected = json.load(open(sys.argv[2]))
        for key, want in expected.items():
            have = got[key]
            if key == "scalars":  # values were stored as float32
                want = [[t, s, struct.unpack("<f", struct.pack("<f", v))[0]] for t, s, v in want]
            if have != want:
                print(f"{key}: expected {want!r}, got {have!r}", file=sys.stderr)
                sys.exit(1)


if __name__ == "__main__":
    main()
