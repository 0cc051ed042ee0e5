#!/usr/bin/env python3
"""Makes test variants of a signed kernel module: the same bytes with the appended signature
stripped (unsigned), with one byte of the PKCS#7 blob flipped (bad signature), or re-signed with
another key (foreign) as scripts/sign-file.c signs: detached PKCS#7 (CMS) SignedData without
certificates or attributes, the signer named by issuer and serial number, or with `keyid` by
subject key identifier (sign-file -k).

The kernel's layout (include/linux/module_signature.h): module bytes, the PKCS#7 blob of
sig_len bytes, struct module_signature (12 bytes, sig_len big-endian in the last 4), then the
28-byte magic. Exits non-zero, saying why, when the input carries no such trailer.
"""
import struct
import subprocess
import sys

MAGIC = b"~Module signature appended~\n"
INFO_SIZE = 12
PKEY_ID_PKCS7 = 2


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


def sign(unsigned, key, cert, keyid):
    """UNSIGNED with a signature by KEY (CERT) appended as sign-file appends it."""
    command = ["openssl", "cms", "-sign", "-binary", "-noattr", "-nocerts", "-nosmimecap",
               "-md", "sha256", "-outform", "DER", "-signer", cert, "-inkey", key]
    if keyid:
        command.append("-keyid")
    blob = subprocess.run(command, input=unsigned, capture_output=True, check=True).stdout
    info = struct.pack(">BBBBB3xI", 0, 0, PKEY_ID_PKCS7, 0, 0, len(blob))
    return unsigned + blob + info + MAGIC


def main():
    usage = ("usage: modsig.py strip|corrupt SIGNED.ko OUT.ko\n"
             "       modsig.py sign|sign-keyid SIGNED.ko KEY.pem CERT.pem OUT.ko")
    modes = {"strip": 4, "corrupt": 4, "sign": 6, "sign-keyid": 6}
    if len(sys.argv) < 2 or modes.get(sys.argv[1]) != len(sys.argv):
        sys.exit(usage)
    mode, source, target = sys.argv[1], sys.argv[2], sys.argv[-1]
    data = open(source, "rb").read()
    try:
        blob_start, info_start = signature_span(data)
    except ValueError as error:
        sys.exit(f"modsig.py: {source}: {error}")
    if mode == "strip":
        out = data[:blob_start]
    elif mode == "corrupt":
        # The blob ends with the RSA signature value: flipping its last byte keeps the DER
        # well-formed, so the kernel gets as far as checking the signature itself.
        out = bytearray(data)
        out[info_start - 1] ^= 0xFF
    else:
        out = sign(data[:blob_start], sys.argv[3], sys.argv[4], mode == "sign-keyid")
    open(target, "wb").write(out)


if __name__ == "__main__":
    main()
