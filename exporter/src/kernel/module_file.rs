//! Kernel module files as `modprobe` would load them: which files `modules.dep` names for a
//! module, whether a file carries an appended signature, and whose.
//!
//! The kernel reads a signature as `module_sig_check` does (kernel/module/signing.c): the
//! decompressed image ends with `~Module signature appended~\n`; before the marker is `struct
//! module_signature` (include/linux/module_signature.h: 12 bytes, `id_type` PKEY_ID_PKCS7,
//! `sig_len` big-endian in the last 4) and before that `sig_len` bytes of PKCS#7 SignedData
//! (scripts/sign-file.c, no certificates), whose SignerInfo names the signing key by issuer and
//! serial number or, signed with `sign-file -k`, by subject key identifier. Compressed modules
//! (`.ko.xz`, `.ko.zst`, `.ko.gz`) carry all of it inside the compressed stream.
//!
//! Only the end of an image is kept: a module streams through a bounded tail buffer, so memory
//! stays at a signature's size and a decoder's window whatever the module's, and the bytes
//! decoded are bounded too: per image, and per scrape.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Mutex;

use xz4rust::{XzDecoder, XzError, XzNextBlockResult};

use crate::error::{CollectError, ErrorKind};
use crate::kernel::modprobe::module_key;
use crate::sync::lock;
use crate::sysfs::{SysDir, SysfsError};

pub const SIGNATURE_MARKER: &[u8] = b"~Module signature appended~\n";
/// `struct module_signature`: algo, hash, id_type, signer_len, key_id_len, 3 pad, sig_len.
const MODULE_SIGNATURE_SIZE: usize = 12;
const PKEY_ID_PKCS7: u8 = 2;
/// The largest PKCS#7 blob taken: sign-file's with a 4096-bit RSA key is well under 1 KiB.
const MAX_SIGNATURE_BYTES: usize = 64 << 10;
const TAIL_BYTES: usize = MAX_SIGNATURE_BYTES + MODULE_SIGNATURE_SIZE + SIGNATURE_MARKER.len();
/// Compressed module files are read up to this size: the largest in-tree modules are a few MiB
/// compressed (mlx5_core.ko.xz is under 1 MiB), out-of-tree GPU drivers some tens of MiB.
const MAX_COMPRESSED_BYTES: u64 = 128 << 20;
/// Decompressed images are decoded up to this size, several times the largest module.
const MAX_IMAGE_BYTES: u64 = 512 << 20;
/// A scrape starts decoding a file only while it has decoded less than this, so that it
/// decodes at most 576 MiB with the file it started last (about 2 s of xz). A file it does
/// not reach is decoded at a later scrape, once the files before it are cached; a file it
/// starts is decoded to its verdict, so that none is decoded twice.
const DECODE_BUDGET_BYTES: u64 = 64 << 20;
/// The most of an image a decoder keeps to decode the rest (xz's dictionary, zstd's window):
/// 64 MiB, xz -9's dictionary. kbuild compresses modules with a 1 MiB one (`xz --check=crc32
/// --lzma2=dict=1MiB`), xz's default is 8 MiB, zstd's levels a few MiB.
const MAX_WINDOW: u64 = 64 << 20;
/// Compressed input is read, and decoded output taken, this much at a time.
const READ_CHUNK: usize = 64 << 10;

/// How a module file is compressed, from its name as `modules.dep` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Xz,
    Zstd,
    Gzip,
}

impl Compression {
    const SUFFIXES: [(&'static str, Compression); 4] = [
        (".ko", Compression::None),
        (".ko.xz", Compression::Xz),
        (".ko.zst", Compression::Zstd),
        (".ko.gz", Compression::Gzip),
    ];

    /// The compression and the module name (`mlx5-core.ko.xz` -> `mlx5_core`); `None` for a
    /// name that is no module file.
    pub fn of(file: &str) -> Option<(Compression, String)> {
        let base = file.rsplit('/').next().unwrap_or(file);
        Self::SUFFIXES.iter().find_map(|(suffix, compression)| {
            let name = base.strip_suffix(suffix)?;
            (!name.is_empty()).then(|| (*compression, module_key(name)))
        })
    }
}

/// The files `modprobe` loads for `module`, as `modules.dep` (written by depmod, every
/// dependency of a module on its line) names them relative to `/lib/modules/<release>`: the
/// module's own file first, then its dependencies. `None` when `modules.dep` has no such module
/// (built in, or absent from this kernel).
pub fn files_to_load(modules_dep: &str, module: &str) -> Option<Vec<String>> {
    modules_dep.lines().find_map(|line| {
        let (file, deps) = line.split_once(':')?;
        let (_, name) = Compression::of(file.trim())?;
        (name == module).then(|| {
            std::iter::once(file.trim())
                .chain(deps.split_whitespace())
                .map(str::to_string)
                .collect()
        })
    })
}

/// How a PKCS#7 SignerInfo names the key that signed (RFC 2315 and 5652 SignerIdentifier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignerId {
    /// The issuer's name as the kernel shortens a certificate name (`x509_fabricate_name`: CN,
    /// or O, or `O: CN`, or the e-mail address) and the serial number's bytes.
    IssuerSerial { issuer: String, serial: Vec<u8> },
    /// The subject key identifier's bytes (`sign-file -k`).
    SubjectKeyId(Vec<u8>),
}

impl fmt::Display for SignerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignerId::IssuerSerial { issuer, .. } => f.write_str(issuer),
            SignerId::SubjectKeyId(id) => write!(f, "keyid:{}", hex(id)),
        }
    }
}

/// What the end of a module image says about its signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    /// No marker: the kernel takes it as unsigned (-ENODATA in `module_sig_check`).
    Unsigned,
    /// A PKCS#7 signature and who signed it (one SignerInfo per signer).
    Signed(Vec<SignerId>),
    /// The marker, but not a signature this reader can take apart; the reason why.
    Malformed(&'static str),
}

/// Verdicts on the module files read in the last scrape, by path and the file's identity: a
/// file is decoded again only when it changes (a package update, a DKMS rebuild), not at every
/// scrape (mlx5_ib and its dependencies are 8 MiB of xz to decode). A file refused for its
/// bytes (not a valid stream, too large) is remembered the same way, so that an unchanged bomb
/// costs one decode, not one a scrape.
pub struct SignatureCache {
    state: Mutex<CacheState>,
    limits: Limits,
}

#[derive(Default)]
struct CacheState {
    files: HashMap<PathBuf, (FileIdentity, Verdict)>,
    /// Bytes decompressed since the start, every file and attempt.
    decoded: u64,
}

/// What a file's bytes give: its signature, or why they are no module image.
type Verdict = Result<Signature, Refusal>;

/// Why a module file's bytes were refused; it holds for as long as the file is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal(&'static str);

/// How much decoding a read of the cache (one scrape) may do.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// One image: past this, the file is refused.
    image: u64,
    /// Files are started while a read has decoded less than this; the rest wait.
    budget: u64,
}

impl Default for SignatureCache {
    fn default() -> Self {
        SignatureCache::with_limits(Limits {
            image: MAX_IMAGE_BYTES,
            budget: DECODE_BUDGET_BYTES,
        })
    }
}

/// Why a module file has no verdict this time.
#[derive(Debug, thiserror::Error)]
pub enum ModuleFileError {
    #[error(transparent)]
    Read(#[from] SysfsError),
    /// This read's decoding budget went to the files before it: read at a later scrape.
    #[error("decode {path}: deferred to the next scrape, {decoded_mib} MiB of module images decoded in this one")]
    Deferred { path: PathBuf, decoded_mib: u64 },
}

impl From<ModuleFileError> for CollectError {
    fn from(err: ModuleFileError) -> CollectError {
        match err {
            ModuleFileError::Read(err) => err.into(),
            deferred => CollectError::new(ErrorKind::Timeout, deferred.to_string()),
        }
    }
}

/// What tells a changed file: same path, same inode, size and change times means same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileIdentity {
    fn of(metadata: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            device: metadata.dev(),
            inode: metadata.ino(),
            size: metadata.size(),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

impl SignatureCache {
    fn with_limits(limits: Limits) -> SignatureCache {
        SignatureCache {
            state: Mutex::default(),
            limits,
        }
    }

    /// The signatures of `files` (paths below `dir`, as `modules.dep` names them), in order.
    /// The cache keeps these files only, so it never outgrows one scrape's list.
    pub fn read(&self, dir: &SysDir, files: &[String]) -> Vec<Result<Signature, ModuleFileError>> {
        let mut state = lock(&self.state);
        let mut kept = HashMap::new();
        let mut decoded = 0;
        let signatures = files
            .iter()
            .map(|file| {
                let path = dir.path(file);
                let cached = state.files.remove(&path);
                let (identity, verdict) =
                    read_signature(dir, file, cached, self.limits, &mut decoded)?;
                kept.insert(path.clone(), (identity, verdict.clone()));
                verdict.map_err(|Refusal(reason)| SysfsError::invalid(&path, reason).into())
            })
            .collect();
        state.files = kept;
        state.decoded += decoded;
        signatures
    }

    /// Bytes of module images decompressed since the start.
    pub fn decoded_bytes(&self) -> u64 {
        lock(&self.state).decoded
    }
}

/// The signature of module file `file`, a path below `dir`, read to the end of its image
/// unless `cached` was read from the same file; `decoded`: what this read has decoded so far,
/// to which the file's decoding is added.
fn read_signature(
    dir: &SysDir,
    file: &str,
    cached: Option<(FileIdentity, Verdict)>,
    limits: Limits,
    decoded: &mut u64,
) -> Result<(FileIdentity, Verdict), ModuleFileError> {
    let path = dir.path(file);
    let Some((compression, _)) = Compression::of(file) else {
        let reason = "not a module file (.ko, .ko.xz, .ko.zst, .ko.gz)";
        return Err(SysfsError::parse(&path, reason, file).into());
    };
    let (mut opened, size) = dir.open_regular_file(file)?;
    let io_error = |source| SysfsError::Io {
        path: path.clone(),
        source,
    };
    let identity = FileIdentity::of(&opened.metadata().map_err(io_error)?);
    if let Some((cached_identity, verdict)) = cached {
        if cached_identity == identity {
            return Ok((identity, verdict));
        }
    }
    if compression == Compression::None {
        let start = size.saturating_sub(TAIL_BYTES as u64);
        opened.seek(SeekFrom::Start(start)).map_err(io_error)?;
        let mut end = Vec::with_capacity(TAIL_BYTES);
        opened
            .take(TAIL_BYTES as u64)
            .read_to_end(&mut end)
            .map_err(io_error)?;
        return Ok((identity, Ok(parse_appended_signature(&end))));
    }
    if size > MAX_COMPRESSED_BYTES {
        let refusal = Refusal("compressed module larger than 128 MiB");
        return Ok((identity, Err(refusal)));
    }
    if *decoded >= limits.budget {
        let decoded_mib = *decoded >> 20;
        return Err(ModuleFileError::Deferred { path, decoded_mib });
    }
    let mut tail = Tail::new(limits.image);
    let input = BufReader::with_capacity(READ_CHUNK, opened.take(MAX_COMPRESSED_BYTES));
    let decoding = decompress(compression, input, &mut tail);
    *decoded += tail.total.min(tail.limit);
    let verdict = match decoding {
        _ if tail.overflowed => Err(Refusal("decompressed module larger than 512 MiB")),
        Ok(()) => Ok(parse_appended_signature(tail.end())),
        Err(Decoding::Io(source)) => return Err(io_error(source).into()),
        Err(Decoding::Format(reason)) => Err(Refusal(reason)),
    };
    Ok((identity, verdict))
}

/// Why a compressed stream could not be decoded: reading failed, or the data is not valid.
enum Decoding {
    Io(io::Error),
    Format(&'static str),
}

/// Decodes a whole compressed module image into `tail`, as it comes: what a decoder keeps
/// is its window (xz's dictionary, zstd's window, deflate's 32 KiB), never the image.
fn decompress(
    compression: Compression,
    mut input: impl io::BufRead,
    tail: &mut Tail,
) -> Result<(), Decoding> {
    // Decoders report bad data as io errors of these kinds; anything else is the file's I/O.
    // Their messages may quote the data, so only the reason is kept.
    let classify = |reason: &'static str| {
        move |err: io::Error| match err.kind() {
            io::ErrorKind::InvalidData
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::UnexpectedEof => Decoding::Format(reason),
            _ => Decoding::Io(err),
        }
    };
    match compression {
        Compression::None => io::copy(&mut input, tail).map(drop).map_err(Decoding::Io),
        Compression::Xz => decompress_xz(input, tail),
        Compression::Zstd => {
            let reason = "not a valid zstd stream";
            let mut decoder =
                ruzstd::decoding::StreamingDecoder::new_with_max_window_size(input, MAX_WINDOW)
                    .map_err(|_| Decoding::Format(reason))?;
            io::copy(&mut decoder, tail)
                .map(drop)
                .map_err(classify(reason))
        }
        Compression::Gzip => {
            let mut decoder = flate2::bufread::GzDecoder::new(input);
            io::copy(&mut decoder, tail)
                .map(drop)
                .map_err(classify("not a valid gzip stream"))
        }
    }
}

/// Decodes one xz stream into `tail` (what follows it is ignored, as the kernel ignores it).
fn decompress_xz(mut input: impl io::BufRead, tail: &mut Tail) -> Result<(), Decoding> {
    let mut decoder = XzDecoder::in_heap_with_alloc_dict_size(0, MAX_WINDOW as usize);
    let mut out = vec![0; READ_CHUNK];
    loop {
        let data = input.fill_buf().map_err(Decoding::Io)?;
        if data.is_empty() {
            return Err(Decoding::Format("not a valid xz stream: cut short"));
        }
        let (consumed, produced, end) = match decoder.decode(data, &mut out) {
            Ok(XzNextBlockResult::NeedMoreData(consumed, produced)) => (consumed, produced, false),
            Ok(XzNextBlockResult::EndOfStream(consumed, produced)) => (consumed, produced, true),
            Err(err) => return Err(Decoding::Format(xz_refusal(&err))),
        };
        input.consume(consumed);
        tail.write_all(&out[..produced]).map_err(Decoding::Io)?;
        if end {
            return Ok(());
        }
    }
}

/// The reason an xz stream is refused, without the values its error carries (checksums and
/// sizes from the file).
fn xz_refusal(err: &XzError) -> &'static str {
    match err {
        XzError::NeedsLargerInputBuffer => "not a valid xz stream: cut short",
        XzError::DictionaryTooLarge(_) => "xz dictionary larger than 64 MiB",
        XzError::UnsupportedStreamHeaderOption
        | XzError::UnsupportedBlockHeaderOption
        | XzError::UnsupportedLzmaProperties(_)
        | XzError::UnsupportedCheckType(_)
        | XzError::Sha256NotSupported => {
            "xz stream with a check or filter other than CRC32, CRC64 and LZMA2"
        }
        XzError::ContentCrc32Mismatch(..) | XzError::ContentCrc64Mismatch(..) => {
            "not a valid xz stream: the image does not match its check"
        }
        _ => "not a valid xz stream",
    }
}

/// The last bytes written to it (at least `TAIL_BYTES` of them once that many came), and how
/// many came in all; refuses to take more than its limit.
struct Tail {
    bytes: Vec<u8>,
    total: u64,
    limit: u64,
    overflowed: bool,
}

impl Tail {
    fn new(limit: u64) -> Tail {
        Tail {
            bytes: Vec::new(),
            total: 0,
            limit,
            overflowed: false,
        }
    }

    fn end(&self) -> &[u8] {
        &self.bytes[self.bytes.len().saturating_sub(TAIL_BYTES)..]
    }
}

impl Write for Tail {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.total += data.len() as u64;
        if self.total > self.limit {
            self.overflowed = true;
            return Err(io::Error::other("decompressed module too large"));
        }
        self.bytes.extend_from_slice(data);
        // Dropping the front only once it is as long again keeps the copying linear.
        if self.bytes.len() > 2 * TAIL_BYTES {
            self.bytes.drain(..self.bytes.len() - TAIL_BYTES);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The signature at the end of a module image (`image_end`: its last bytes, at least
/// `TAIL_BYTES` of them unless the image is shorter), checked as `mod_check_sig` checks it.
pub fn parse_appended_signature(image_end: &[u8]) -> Signature {
    let Some(rest) = image_end.strip_suffix(SIGNATURE_MARKER) else {
        return Signature::Unsigned;
    };
    let Some(info_start) = rest.len().checked_sub(MODULE_SIGNATURE_SIZE) else {
        return Signature::Malformed("no struct module_signature before the marker");
    };
    let (before, info) = rest.split_at(info_start);
    let sig_len = u32::from_be_bytes([info[8], info[9], info[10], info[11]]) as usize;
    if info[2] != PKEY_ID_PKCS7 {
        return Signature::Malformed("not a PKCS#7 signature (id_type)");
    }
    if info[..2] != [0, 0] || info[3..8] != [0; 5] {
        return Signature::Malformed("unexpected non-zero signature parameters");
    }
    if sig_len == 0 || sig_len > MAX_SIGNATURE_BYTES || sig_len >= before.len() {
        return Signature::Malformed("signature length out of range");
    }
    match pkcs7_signers(&before[before.len() - sig_len..]) {
        Ok(signers) if !signers.is_empty() => Signature::Signed(signers),
        Ok(_) => Signature::Malformed("PKCS#7 message without a signer"),
        Err(reason) => Signature::Malformed(reason),
    }
}

const TAG_INTEGER: u8 = 0x02;
const TAG_OID: u8 = 0x06;
const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_CONTEXT_0: u8 = 0xa0;
const TAG_CONTEXT_1: u8 = 0xa1;
/// `[0] IMPLICIT SubjectKeyIdentifier`, a primitive OCTET STRING.
const TAG_SUBJECT_KEY_ID: u8 = 0x80;

/// pkcs7-signedData, 1.2.840.113549.1.7.2.
const OID_SIGNED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x02];
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
const OID_EMAIL: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];

/// The signers of a DER PKCS#7 ContentInfo holding SignedData.
fn pkcs7_signers(blob: &[u8]) -> Result<Vec<SignerId>, &'static str> {
    let mut outer = Der(blob);
    let mut content_info = Der(outer.expect(TAG_SEQUENCE)?);
    if content_info.expect(TAG_OID)? != OID_SIGNED_DATA {
        return Err("PKCS#7 content is not signedData");
    }
    let mut signed_data = Der(Der(content_info.expect(TAG_CONTEXT_0)?).expect(TAG_SEQUENCE)?);
    signed_data.expect(TAG_INTEGER)?; // version
    signed_data.expect(TAG_SET)?; // digestAlgorithms
    signed_data.expect(TAG_SEQUENCE)?; // contentInfo
    let mut signer_infos = loop {
        match signed_data.next()? {
            Some((TAG_CONTEXT_0 | TAG_CONTEXT_1, _)) => continue, // certificates, crls
            Some((TAG_SET, infos)) => break Der(infos),
            _ => return Err("PKCS#7 SignedData without signerInfos"),
        }
    };
    let mut signers = Vec::new();
    while let Some((tag, info)) = signer_infos.next()? {
        if tag != TAG_SEQUENCE {
            return Err("PKCS#7 SignerInfo is not a SEQUENCE");
        }
        let mut info = Der(info);
        info.expect(TAG_INTEGER)?; // version
        let signer = match info.next()? {
            Some((TAG_SEQUENCE, issuer_and_serial)) => {
                let mut fields = Der(issuer_and_serial);
                let issuer = fabricated_name(fields.expect(TAG_SEQUENCE)?)?;
                let serial = fields.expect(TAG_INTEGER)?.to_vec();
                SignerId::IssuerSerial { issuer, serial }
            }
            Some((TAG_SUBJECT_KEY_ID, id)) => SignerId::SubjectKeyId(id.to_vec()),
            _ => return Err("PKCS#7 SignerInfo without a signer identifier"),
        };
        signers.push(signer);
    }
    Ok(signers)
}

/// An X.501 Name shortened as the kernel names a certificate's subject in a key's description
/// (crypto/asymmetric_keys/x509_cert_parser.c, `x509_fabricate_name`): the last CN, O and
/// e-mail address; CN alone when O is its prefix (or both share their first 7 bytes), else
/// `O: CN`; then CN, O or the e-mail address alone.
fn fabricated_name(name: &[u8]) -> Result<String, &'static str> {
    let (mut cn, mut o, mut email): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
    let mut rdns = Der(name);
    while let Some((tag, rdn)) = rdns.next()? {
        if tag != TAG_SET {
            return Err("certificate name part is not a SET");
        }
        let mut attributes = Der(rdn);
        while let Some((tag, attribute)) = attributes.next()? {
            if tag != TAG_SEQUENCE {
                return Err("certificate name attribute is not a SEQUENCE");
            }
            let mut attribute = Der(attribute);
            let oid = attribute.expect(TAG_OID)?;
            let Some((_, value)) = attribute.next()? else {
                return Err("certificate name attribute without a value");
            };
            match oid {
                OID_COMMON_NAME => cn = value,
                OID_ORGANIZATION => o = value,
                OID_EMAIL => email = value,
                _ => {}
            }
        }
    }
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    Ok(match (cn.is_empty(), o.is_empty()) {
        (false, false) if cn.starts_with(o) => text(cn),
        (false, false) if cn.len() >= 7 && o.len() >= 7 && cn[..7] == o[..7] => text(cn),
        (false, false) => format!("{}: {}", text(o), text(cn)),
        (false, true) => text(cn),
        (true, false) => text(o),
        (true, true) => text(email),
    })
}

/// A DER reader over the elements of one constructed value.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    /// The next element's tag and content; `None` at the end.
    fn next(&mut self) -> Result<Option<(u8, &'a [u8])>, &'static str> {
        let Some((&tag, rest)) = self.0.split_first() else {
            return Ok(None);
        };
        if tag & 0x1f == 0x1f {
            return Err("DER tag in the long form");
        }
        let (&first, rest) = rest.split_first().ok_or("DER element without a length")?;
        let (len, rest) = match first {
            0..=0x7f => (usize::from(first), rest),
            0x81..=0x84 => {
                let count = usize::from(first & 0x7f);
                if rest.len() < count {
                    return Err("DER length cut short");
                }
                let (bytes, rest) = rest.split_at(count);
                let len = bytes
                    .iter()
                    .fold(0usize, |len, &b| len << 8 | usize::from(b));
                (len, rest)
            }
            _ => return Err("DER length indefinite or too large"),
        };
        if rest.len() < len {
            return Err("DER element longer than its container");
        }
        let (content, rest) = rest.split_at(len);
        self.0 = rest;
        Ok(Some((tag, content)))
    }

    /// The next element's content, which must have tag `tag`.
    fn expect(&mut self, tag: u8) -> Result<&'a [u8], &'static str> {
        match self.next()? {
            Some((found, content)) if found == tag => Ok(content),
            _ => Err("PKCS#7 element missing or of an unexpected type"),
        }
    }
}

/// Lower-case hex, as the kernel prints key ids (`bin2hex`, `%phN`).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::Path;

    /// The fixture root's module directory (real Debian 6.12 modules and variants of pcspkr;
    /// tests/fixtures/README.md says how each was made).
    pub(crate) fn fixture_modules() -> SysDir {
        let root =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/modules_signed_files");
        SysDir::open(&root, "lib/modules/6.12.117+deb12-amd64").unwrap()
    }

    fn signature_of(file: &str) -> Result<Signature, ModuleFileError> {
        let cache = SignatureCache::default();
        cache
            .read(&fixture_modules(), &[file.to_string()])
            .remove(0)
    }

    pub(crate) fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    fn issuer_serial(issuer: &str, serial: &str) -> SignerId {
        SignerId::IssuerSerial {
            issuer: issuer.to_string(),
            serial: unhex(serial),
        }
    }

    fn debian_6_12_signer() -> SignerId {
        issuer_serial(
            "Build time autogenerated kernel key",
            "15fd607c19670f4fe8286201b8640ffa2b935dae",
        )
    }

    #[test]
    fn debian_modules_as_shipped_are_signed_by_the_build_key() {
        for file in [
            "kernel/drivers/input/misc/pcspkr.ko.xz",
            "kernel/crypto/geniv.ko.xz",
            // pcspkr's image recompressed with gzip.
            "extra/lab_debian.ko.gz",
        ] {
            assert_eq!(
                signature_of(file).unwrap(),
                Signature::Signed(vec![debian_6_12_signer()]),
                "{file}"
            );
        }
    }

    #[test]
    fn signers_named_by_key_identifier_or_issuer_and_serial_through_every_compression() {
        let keyid = |id: &str| SignerId::SubjectKeyId(unhex(id));
        assert_eq!(
            signature_of("updates/dkms/lab_mok.ko.xz").unwrap(),
            Signature::Signed(vec![keyid("00e3e3837fcbb7f6b9a044a8f424d4683a4ba61a")])
        );
        assert_eq!(
            signature_of("updates/dkms/lab_foreign_keyid.ko.zst").unwrap(),
            Signature::Signed(vec![keyid("d1e7c1326572d660b7d3e4e9cfe004533667504c")])
        );
        // Subject O=Lab, CN=Lab foreign module key: the CN starts with the O, so the kernel
        // names the certificate by its CN alone.
        let Signature::Signed(signers) =
            signature_of("updates/dkms/lab_foreign_serial.ko.gz").unwrap()
        else {
            panic!("not signed");
        };
        assert!(
            matches!(&signers[..], [SignerId::IssuerSerial { issuer, serial }]
                if issuer == "Lab foreign module key" && serial.len() == 20),
            "{signers:?}"
        );
        assert_eq!(
            signature_of("extra/lab_unsigned.ko").unwrap(),
            Signature::Unsigned
        );
    }

    #[test]
    fn a_cut_or_missing_file_is_an_error_naming_it() {
        let err = signature_of("extra/lab_truncated.ko.xz").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("lab_truncated.ko.xz") && text.contains("not a valid xz stream"),
            "{text}"
        );
        assert!(matches!(
            signature_of("extra/absent.ko"),
            Err(ModuleFileError::Read(err)) if err.is_not_found()
        ));
        let err = signature_of("modules.dep").unwrap_err().to_string();
        assert!(err.contains("not a module file"), "{err}");
    }

    #[test]
    fn a_replaced_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let modules = fixture_modules();
        let source = modules.path("extra/lab_unsigned.ko");
        let signed = std::fs::read(modules.path("kernel/drivers/input/misc/pcspkr.ko.xz")).unwrap();
        let file = dir.path().join("m.ko.xz");
        let unsigned_xz = {
            let mut out = Vec::new();
            lzma_rs::xz_compress(&mut &std::fs::read(source).unwrap()[..], &mut out).unwrap();
            out
        };
        let cache = SignatureCache::default();
        let read = |cache: &SignatureCache| {
            let dir = SysDir::open(dir.path(), "").unwrap();
            cache
                .read(&dir, &["m.ko.xz".to_string()])
                .remove(0)
                .unwrap()
        };
        std::fs::write(&file, &signed).unwrap();
        assert!(matches!(read(&cache), Signature::Signed(_)));
        assert!(matches!(read(&cache), Signature::Signed(_)));
        // Replaced by the unsigned build (a new inode, as package managers and DKMS do).
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, &unsigned_xz).unwrap();
        assert_eq!(read(&cache), Signature::Unsigned);
    }

    #[test]
    fn decoding_stops_at_the_image_limit() {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(&vec![0u8; 1 << 20]).unwrap();
        let gzip = gzip.finish().unwrap();
        let mut tail = Tail::new(256 << 10);
        assert!(decompress(Compression::Gzip, &gzip[..], &mut tail).is_err());
        assert!(tail.overflowed);
        let mut tail = Tail::new(2 << 20);
        assert!(decompress(Compression::Gzip, &gzip[..], &mut tail).is_ok());
        assert_eq!((tail.total, tail.end().len()), (1 << 20, TAIL_BYTES));
    }

    /// `image` compressed as `compression` by another library's encoder (xz: lzma-rs's, which
    /// writes literals only).
    pub(crate) fn compressed(compression: Compression, image: &[u8]) -> Vec<u8> {
        match compression {
            Compression::None => image.to_vec(),
            Compression::Xz => {
                let mut out = Vec::new();
                lzma_rs::xz_compress(&mut &image[..], &mut out).unwrap();
                out
            }
            Compression::Zstd => ruzstd::encoding::compress_to_vec(
                image,
                ruzstd::encoding::CompressionLevel::Fastest,
            ),
            Compression::Gzip => {
                let mut gzip =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gzip.write_all(image).unwrap();
                gzip.finish().unwrap()
            }
        }
    }

    const COMPRESSED: [(Compression, &str); 3] = [
        (Compression::Xz, "xz"),
        (Compression::Zstd, "zst"),
        (Compression::Gzip, "gz"),
    ];

    /// A cache with small limits, a directory of module files, and reads of them.
    struct Scratch {
        dir: tempfile::TempDir,
        cache: SignatureCache,
    }

    impl Scratch {
        fn new(image: u64, budget: u64) -> Scratch {
            Scratch {
                dir: tempfile::tempdir().unwrap(),
                cache: SignatureCache::with_limits(Limits { image, budget }),
            }
        }

        /// Writes `name` anew (a new inode, as package managers and DKMS do).
        fn write(&self, name: &str, bytes: &[u8]) {
            let path = self.dir.path().join(name);
            let _ = std::fs::remove_file(&path);
            std::fs::write(path, bytes).unwrap();
        }

        fn read(&self, files: &[&str]) -> Vec<Result<Signature, ModuleFileError>> {
            let dir = SysDir::open(self.dir.path(), "").unwrap();
            let files: Vec<String> = files.iter().map(|f| f.to_string()).collect();
            self.cache.read(&dir, &files)
        }
    }

    #[test]
    fn a_refused_file_is_not_decoded_again_until_it_changes() {
        for (compression, suffix) in COMPRESSED {
            let scratch = Scratch::new(1 << 20, 8 << 20);
            let file = format!("bomb.ko.{suffix}");
            // Zeros twice the image limit: refused once 1 MiB is decoded.
            scratch.write(&file, &compressed(compression, &vec![0; 2 << 20]));
            for _ in 0..3 {
                let err = scratch.read(&[&file]).remove(0).unwrap_err().to_string();
                assert!(
                    err.contains(&file) && err.contains("decompressed module larger than"),
                    "{err}"
                );
                assert_eq!(scratch.cache.decoded_bytes(), 1 << 20, "{file}");
            }
            // A corrupt stream is refused once too.
            let mut corrupt = compressed(compression, &[7; 4096]);
            let middle = corrupt.len() / 2;
            corrupt[middle] ^= 0x55;
            corrupt.truncate(corrupt.len() - 3);
            scratch.write(&file, &corrupt);
            let first = scratch.read(&[&file]).remove(0).unwrap_err().to_string();
            let decoded = scratch.cache.decoded_bytes();
            let again = scratch.read(&[&file]).remove(0).unwrap_err().to_string();
            assert_eq!((first, decoded), (again, scratch.cache.decoded_bytes()));
            // Replaced by a module: decoded, and its verdict kept the same way.
            let image = signed_image(b"\x30\x03\x02\x01\x01", |_| {});
            scratch.write(&file, &compressed(compression, &image));
            let verdict = Signature::Malformed("PKCS#7 element missing or of an unexpected type");
            for _ in 0..2 {
                assert_eq!(scratch.read(&[&file]).remove(0).unwrap(), verdict);
                let expected = (1 << 20) + (decoded - (1 << 20)) + image.len() as u64;
                assert_eq!(scratch.cache.decoded_bytes(), expected, "{file}");
            }
        }
    }

    /// A file of `tests/fixtures/module_bombs` (module_bombs.sh says how each was made).
    pub(crate) fn bomb_fixture(name: &str) -> Vec<u8> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/module_bombs");
        std::fs::read(dir.join(name)).unwrap()
    }

    #[test]
    fn xz_as_distributions_write_it_and_a_dictionary_past_the_limit() {
        let scratch = Scratch::new(MAX_IMAGE_BYTES, DECODE_BUDGET_BYTES);
        // xz's defaults (CRC64, 8 MiB dictionary) rather than kbuild's.
        scratch.write("crc64.ko.xz", &bomb_fixture("unsigned_crc64.ko.xz"));
        // The same module, its block header asking for a 128 MiB dictionary: refused before
        // any is allocated or decoded.
        scratch.write("dict.ko.xz", &bomb_fixture("dict_128m.ko.xz"));
        let [crc64, dict] =
            <[_; 2]>::try_from(scratch.read(&["crc64.ko.xz", "dict.ko.xz"])).unwrap();
        assert_eq!(crc64.unwrap(), Signature::Unsigned);
        let err = dict.unwrap_err().to_string();
        assert!(
            err.contains("dict.ko.xz: xz dictionary larger than 64 MiB"),
            "{err}"
        );
        assert_eq!(scratch.cache.decoded_bytes(), 14320);
    }

    #[test]
    fn a_scrape_starts_no_file_past_its_budget() {
        // Four images of 600 KiB, files started while less than 1 MiB is decoded: a read
        // decodes two, the others are deferred (neither refused nor cached) to the next, and
        // no image is decoded twice.
        let scratch = Scratch::new(1 << 20, 1 << 20);
        let image: Vec<u8> = (0..600 << 10).map(|i: u32| (i % 251) as u8).collect();
        let files = ["a.ko.gz", "b.ko.zst", "c.ko.xz", "d.ko.gz"];
        let compressions = [
            Compression::Gzip,
            Compression::Zstd,
            Compression::Xz,
            Compression::Gzip,
        ];
        for (file, compression) in files.iter().zip(compressions) {
            scratch.write(file, &compressed(compression, &image));
        }
        let unsigned =
            |read: &Result<Signature, ModuleFileError>| matches!(read, Ok(Signature::Unsigned));
        let mut first = scratch.read(&files);
        assert!(first[..2].iter().all(unsigned), "{first:?}");
        assert_eq!(scratch.cache.decoded_bytes(), 2 * image.len() as u64);
        // Counted as a timeout: decoding took this scrape's time.
        for (read, file) in first.drain(2..).zip(["c.ko.xz", "d.ko.gz"]) {
            let err = CollectError::from(read.unwrap_err());
            assert_eq!(err.kind, ErrorKind::Timeout);
            let cause = format!("{file}: deferred to the next scrape, 1 MiB of module images");
            assert!(err.cause.contains(&cause), "{}", err.cause);
        }
        let second = scratch.read(&files);
        assert!(second.iter().all(unsigned), "{second:?}");
        assert_eq!(scratch.cache.decoded_bytes(), 4 * image.len() as u64);
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_whatever_the_writes() {
        let data: Vec<u8> = (0..3 * TAIL_BYTES + 17).map(|i| (i % 251) as u8).collect();
        for chunk in [1, 4096, 65536, data.len()] {
            let mut tail = Tail::new(u64::MAX);
            for piece in data.chunks(chunk) {
                tail.write_all(piece).unwrap();
            }
            assert_eq!(
                tail.end(),
                &data[data.len() - TAIL_BYTES..],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn modules_dep_names_the_module_and_its_dependencies() {
        let dep = "kernel/crypto/crypto_null.ko.xz:\n\
                   kernel/crypto/geniv.ko.xz: kernel/crypto/crypto_null.ko.xz\n\
                   kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko.zst: kernel/drivers/net/ethernet/mellanox/mlxfw/mlxfw.ko.zst kernel/drivers/pci/controller/pci-hyperv-intf.ko.zst\n\
                   garbage line\n";
        assert_eq!(
            files_to_load(dep, "geniv").unwrap(),
            [
                "kernel/crypto/geniv.ko.xz",
                "kernel/crypto/crypto_null.ko.xz"
            ]
        );
        assert_eq!(files_to_load(dep, "mlx5_core").unwrap().len(), 3);
        assert_eq!(files_to_load(dep, "crypto_null").unwrap().len(), 1);
        assert_eq!(files_to_load(dep, "mlx5"), None);
        assert_eq!(
            Compression::of("kernel/drivers/pci/controller/pci-hyperv-intf.ko.gz"),
            Some((Compression::Gzip, "pci_hyperv_intf".to_string()))
        );
        for not_module in ["modules.dep", ".ko", "x.ko.bz2", "x.o"] {
            assert_eq!(Compression::of(not_module), None, "{not_module}");
        }
    }

    /// A module image with `blob` appended as sign-file appends it, `info` changed by `edit`.
    fn signed_image(blob: &[u8], edit: impl Fn(&mut [u8; 12])) -> Vec<u8> {
        let mut info = [0u8; 12];
        info[2] = PKEY_ID_PKCS7;
        info[8..].copy_from_slice(&(blob.len() as u32).to_be_bytes());
        edit(&mut info);
        [&b"\x7fELF module"[..], blob, &info, SIGNATURE_MARKER].concat()
    }

    #[test]
    fn a_trailer_the_kernel_would_refuse_is_malformed() {
        let blob = b"\x30\x03\x02\x01\x01";
        type Edit = fn(&mut [u8; 12]);
        let cases: [(Edit, &str); 4] = [
            (|info| info[2] = 1, "not a PKCS#7 signature (id_type)"),
            (
                |info| info[0] = 4,
                "unexpected non-zero signature parameters",
            ),
            (|info| info[8] = 0xff, "signature length out of range"),
            (|info| info[8..].fill(0), "signature length out of range"),
        ];
        for (edit, reason) in cases {
            assert_eq!(
                parse_appended_signature(&signed_image(blob, edit)),
                Signature::Malformed(reason)
            );
        }
        assert_eq!(
            parse_appended_signature(&signed_image(blob, |_| {})),
            Signature::Malformed("PKCS#7 element missing or of an unexpected type")
        );
        assert_eq!(
            parse_appended_signature(SIGNATURE_MARKER),
            Signature::Malformed("no struct module_signature before the marker")
        );
        assert_eq!(parse_appended_signature(b""), Signature::Unsigned);
    }

    /// DER element `tag` with `content`, the length in the short or long form.
    pub(crate) fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let len = content.len();
        let mut out = vec![tag];
        match len {
            0..=0x7f => out.push(len as u8),
            0x80..=0xff => out.extend([0x81, len as u8]),
            _ => out.extend([0x82, (len >> 8) as u8, len as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// An X.501 name of (attribute OID, value) pairs, one RDN each.
    pub(crate) fn name(attributes: &[(&[u8], &str)]) -> Vec<u8> {
        let rdns: Vec<u8> = attributes
            .iter()
            .flat_map(|(oid, value)| {
                let attribute = [der(TAG_OID, oid), der(0x0c, value.as_bytes())].concat();
                der(TAG_SET, &der(TAG_SEQUENCE, &attribute))
            })
            .collect();
        der(TAG_SEQUENCE, &rdns)
    }

    /// PKCS#7 SignedData as sign-file writes it, one SignerInfo per signer.
    pub(crate) fn pkcs7(signers: &[Vec<u8>]) -> Vec<u8> {
        let infos: Vec<u8> = signers
            .iter()
            .flat_map(|sid| {
                let algorithm = der(TAG_SEQUENCE, &der(TAG_OID, &[0x60, 0x86, 0x48]));
                let content = [
                    der(TAG_INTEGER, &[1]),
                    sid.clone(),
                    algorithm.clone(),
                    algorithm,
                    der(0x04, &[0xaa; 256]),
                ]
                .concat();
                der(TAG_SEQUENCE, &content)
            })
            .collect();
        let signed_data = [
            der(TAG_INTEGER, &[1]),
            der(TAG_SET, &[]),
            der(TAG_SEQUENCE, &der(TAG_OID, &[0x2a, 0x86, 0x48])),
            der(TAG_SET, &infos),
        ]
        .concat();
        let content = [
            der(TAG_OID, OID_SIGNED_DATA),
            der(TAG_CONTEXT_0, &der(TAG_SEQUENCE, &signed_data)),
        ]
        .concat();
        der(TAG_SEQUENCE, &content)
    }

    #[test]
    fn certificate_names_are_shortened_as_the_kernel_does() {
        type Attributes<'a> = &'a [(&'a [u8], &'a str)];
        let cases: [(Attributes, &str); 7] = [
            (
                &[(OID_COMMON_NAME, "Build time autogenerated kernel key")],
                "Build time autogenerated kernel key",
            ),
            // The CN starts with the O: the CN alone.
            (
                &[
                    (OID_ORGANIZATION, "Red Hat"),
                    (
                        OID_COMMON_NAME,
                        "Red Hat Enterprise Linux kernel signing key",
                    ),
                ],
                "Red Hat Enterprise Linux kernel signing key",
            ),
            // Their first 7 bytes agree: the CN alone.
            (
                &[
                    (OID_ORGANIZATION, "Canonical Ltd."),
                    (OID_COMMON_NAME, "Canonical Ltd. Live Patch Signing"),
                ],
                "Canonical Ltd. Live Patch Signing",
            ),
            (
                &[
                    (OID_ORGANIZATION, "Acme HPC"),
                    (OID_COMMON_NAME, "DKMS module signing key"),
                ],
                "Acme HPC: DKMS module signing key",
            ),
            (&[(OID_ORGANIZATION, "Acme HPC")], "Acme HPC"),
            (&[(OID_EMAIL, "ops@example.org")], "ops@example.org"),
            // The last CN counts.
            (
                &[(OID_COMMON_NAME, "first"), (OID_COMMON_NAME, "second")],
                "second",
            ),
        ];
        for (attributes, expected) in cases {
            let sid = der(
                TAG_SEQUENCE,
                &[name(attributes), der(TAG_INTEGER, &[0x01])].concat(),
            );
            let image = signed_image(&pkcs7(&[sid]), |_| {});
            assert_eq!(
                parse_appended_signature(&image),
                Signature::Signed(vec![SignerId::IssuerSerial {
                    issuer: expected.to_string(),
                    serial: vec![1]
                }])
            );
        }
    }
}

#[cfg(test)]
mod proptests {
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
}
