#!/usr/bin/env python3
"""Makes test variants of a signed kernel module: the same bytes with the appended signature
stripped (unsigned), or with one byte of the PKCS#7 blob flipped (bad signature).

The kernel's layout (include/linux/module_signature.h): module bytes, the PKCS#7 blob of
sig_len bytes, struct module_signature (12 bytes, sig_len big-endian in the last 4), then the
28-byte magic. Exits non-zero, saying why, when the input carries no such trailer.
"""
import struct
import sys

MAGIC = b"~Module signature appended~\n"
INFO_SIZE = 12


def signature_span(data):
    """(start of the PKCS#7 blob, start of struct module_signature) of a signed module."""
    if not data.endswith(MAGIC):
        raise ValueError("no appended module signature (magic missing)")
    info_start = len(data) - len(MAGIC) - INFO_SIZE
    (sig_len,) = struct.unpack(">I", data[info_start + 8 : info_start + 12])
    blob_start = info_start - sig_len
    if sig_len == 0 or blob_start <= 0:
        raise ValueError(f"implausible signature length {sig_len}")
    return blob_start, info_start


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("strip", "corrupt"):
        sys.exit("usage: modsig.py strip|corrupt SIGNED.ko OUT.ko")
    mode, source, target = sys.argv[1:]
    data = open(source, "rb").read()
    try:
        blob_start, info_start = signature_span(data)
    except ValueError as error:
        sys.exit(f"modsig.py: {source}: {error}")
    if mode == "strip":
        out = data[:blob_start]
    else:
        # The blob ends with the RSA signature value: flipping its last byte keeps the DER
        # well-formed, so the kernel gets as far as checking the signature itself.
        out = bytearray(data)
        out[info_start - 1] ^= 0xFF
    open(target, "wb").write(out)


if __name__ == "__main__":
    main()
