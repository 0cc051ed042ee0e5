use super::pkcs7::{OID_COMMON_NAME, TAG_INTEGER, TAG_SEQUENCE, TAG_SUBJECT_KEY_ID};
use super::tests::{bomb_fixture, compressed, der, fixture_modules, name, pkcs7};
use super::*;
use crate::test_strategies::{binary, bytes};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

const TRAILER_TOKENS: &[&str] = &[
    "~Module signature appended~\n",
    "\x30\u{82}",
    "\x30",
    "\x31",
    "\x02\x01\x01",
    "\u{a0}",
    "\u{80}\x14",
    "\x06\x09",
    "\0\0\x02\0\0\0\0\0",
    "\0\0\x01\x00",
];

fn signer() -> impl Strategy<Value = SignerId> {
    prop_oneof![
        vec(any::<u8>(), 1..=20).prop_map(SignerId::SubjectKeyId),
        ("[A-Za-z0-9 ]{1,40}", vec(any::<u8>(), 1..=20))
            .prop_map(|(issuer, serial)| SignerId::IssuerSerial { issuer, serial }),
    ]
}

fn encoded(signer: &SignerId) -> Vec<u8> {
    match signer {
        SignerId::SubjectKeyId(id) => der(TAG_SUBJECT_KEY_ID, id),
        SignerId::IssuerSerial { issuer, serial } => {
            let issuer = name(&[(OID_COMMON_NAME, issuer.as_str())]);
            der(TAG_SEQUENCE, &[issuer, der(TAG_INTEGER, serial)].concat())
        }
    }
}

/// A module image: arbitrary bytes, or runs and repeats that compress well.
fn image() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..4096),
        (any::<u8>(), 1..300_000usize).prop_map(|(byte, len)| vec![byte; len]),
        (vec(any::<u8>(), 1..64), 1..2000usize).prop_map(|(piece, n)| piece.repeat(n)),
    ]
}

/// The last bytes of `image`, as a tail keeps them.
fn end_of(image: &[u8]) -> &[u8] {
    &image[image.len().saturating_sub(TAIL_BYTES)..]
}

/// `stream` decoded by lzma-rs, the reference: the image, or whether it was refused.
fn reference_xz(stream: &[u8]) -> Option<Vec<u8>> {
    let mut image = Vec::new();
    lzma_rs::xz_decompress(&mut &stream[..], &mut image).ok()?;
    Some(image)
}

proptest! {
    #[test]
    fn written_streams_decode_to_their_image(
        image in image(),
        compression in prop::sample::select(&[Compression::Xz, Compression::Zstd, Compression::Gzip][..]),
    ) {
        let stream = compressed(compression, &image);
        let mut tail = Tail::new(1 << 20);
        prop_assert!(decompress(compression, &stream[..], &mut tail).is_ok());
        prop_assert_eq!(tail.total, image.len() as u64);
        prop_assert_eq!(tail.end(), end_of(&image));
    }

    /// A real xz stream (xz-utils' encoder, CRC64 and CRC32) or a written one, damaged:
    /// refused, or read as lzma-rs reads it. Never read where lzma-rs refuses; refused
    /// sometimes where it reads, as xz-utils refuses (a range coder that does not end
    /// clean: the image checks out, the stream is corrupt).
    #[test]
    fn damaged_xz_streams_are_refused_or_read_as_the_reference_reads_them(
        stream in prop_oneof![
            Just(bomb_fixture("unsigned_crc64.ko.xz")),
            Just(std::fs::read(fixture_modules().path("updates/dkms/lab_mok.ko.xz")).unwrap()),
            image().prop_map(|image| compressed(Compression::Xz, &image)),
        ],
        at in any::<Index>(),
        flip in 1..=255u8,
        cut in any::<bool>(),
    ) {
        let mut stream = stream;
        let at = at.index(stream.len());
        if cut {
            stream.truncate(at);
        } else {
            stream[at] ^= flip;
        }
        let mut tail = Tail::new(1 << 20);
        let ours = decompress(Compression::Xz, &stream[..], &mut tail);
        if ours.is_ok() {
            let Some(image) = reference_xz(&stream) else {
                return Err(TestCaseError::fail("read a stream the reference refuses"));
            };
            prop_assert_eq!(tail.end(), end_of(&image));
        }
    }

    #[test]
    fn any_module_end_gives_a_verdict(data in bytes(TRAILER_TOKENS)) {
        if let Signature::Signed(signers) = parse_appended_signature(&data) {
            prop_assert!(!signers.is_empty());
            prop_assert!(data.ends_with(SIGNATURE_MARKER));
        }
    }

    #[test]
    fn written_signatures_read_back(signers in vec(signer(), 1..4), module in vec(any::<u8>(), 1..64)) {
        let blob = pkcs7(&signers.iter().map(encoded).collect::<Vec<_>>());
        let mut info = [0u8; 12];
        info[2] = PKEY_ID_PKCS7;
        info[8..].copy_from_slice(&(blob.len() as u32).to_be_bytes());
        let image = [&module[..], &blob, &info, SIGNATURE_MARKER].concat();
        prop_assert_eq!(parse_appended_signature(&image), Signature::Signed(signers));
        prop_assert_eq!(parse_appended_signature(&module), Signature::Unsigned);
    }

    #[test]
    fn any_compressed_input_is_decoded_or_refused(
        // Magic numbers, and an xz stream header and block header that pass their CRCs
        // (kbuild's: CRC32, a 1 MiB dictionary).
        data in binary(&[
            b"\xfd7zXZ\0",
            b"\x28\xb5\x2f\xfd",
            b"\x1f\x8b\x08",
            b"\0",
            b"\xfd7zXZ\0\0\x01\x69\x22\xde\x36",
            b"\x02\0\x21\x01\x10\0\0\0\xa8\x70\x8e\x86",
        ]),
        compression in prop::sample::select(&[Compression::Xz, Compression::Zstd, Compression::Gzip][..]),
    ) {
        let mut tail = Tail::new(1 << 20);
        let _ = decompress(compression, &data[..], &mut tail);
        prop_assert!(tail.total <= 1 << 20 && tail.end().len() <= TAIL_BYTES);
    }
}
