#!/usr/bin/env python3
"""Writes the generated seed files of the fuzz corpora: tokens signed with
the fixed fuzz key (bytes 0..31, as fuzz.h), as token inputs and as
Idempotency-Key header values. Deterministic: rerunning it rewrites the
same files. Usage: python3 tests/fuzz/gen_seeds.py"""
import base64
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = bytes(range(32))


def token(key_id, tenant, op, tid, issued, expires, subject, version=None,
          key=KEY):
    flags = 1 if version is not None else 0
    payload = struct.pack("<BBIII16sII", 1, flags, key_id, tenant, op, tid,
                          issued, expires)
    if version is not None:
        payload += struct.pack("<Q", version)
    payload += bytes([len(subject)]) + subject
    tag = hashlib.blake2b(payload, digest_size=16, key=key).digest()
    return base64.urlsafe_b64encode(payload + tag).rstrip(b"=")


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    ids = [bytes(range(i, i + 16)) for i in (0, 16, 32)]
    toks = {
        "tok-plain": token(1, 1, 7, ids[0], 1700000000, 1700003600,
                           b"user-42"),
        "tok-version": token(2, 3, 9, ids[1], 1700000000, 1700086400,
                             b"alice@example.com", version=7),
        "tok-max-subject": token(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, ids[2],
                                 0, 0xFFFFFFFF, b"s" * 128,
                                 version=2**64 - 1),
        "tok-short-subject": token(1, 2, 3, ids[0], 1, 2, b"x"),
        "tok-other-key": token(1, 1, 7, ids[0], 1700000000, 1700003600,
                               b"user-42", key=bytes(32)),
    }
    for name, t in toks.items():
        assert len(t) <= 256
        write("token", name, t)
    t = toks["tok-plain"]
    write("headers", "key-bare", t)
    write("headers", "key-quoted", b'"' + t + b'"')
    write("headers", "key-ows", b' \t"' + t + b'" ')
    write("headers", "key-escaped", b'"' + t[:10] + b'\\\\' + t[10:] + b'"')
    write("headers", "key-route", t + b"\0POST\0/v1/tokens/" + t + b"/claim")


if __name__ == "__main__":
    main()
