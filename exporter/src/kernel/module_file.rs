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
use pkcs7::pkcs7_signers;

mod pkcs7;

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

/// Lower-case hex, as the kernel prints key ids (`bin2hex`, `%phN`).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;
