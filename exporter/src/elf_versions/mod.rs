//! What an ELF shared object says about its symbol versions, read from its bytes: the versions
//! it defines (`.gnu.version_d`: libibverbs' `IBVERBS_1.14`, `IBVERBS_PRIVATE_34`), the versions
//! it needs of other objects (`.gnu.version_r`: a provider's `IBVERBS_PRIVATE_34` of
//! `libibverbs.so.1`), and the NUL-terminated strings of its `.rodata` a caller asks for (the
//! provider path rdma-core compiles into libibverbs). Plain code, no I/O; every offset is
//! checked against the bytes given, every walk is bounded, and nothing panics on bad input.
//!
//! The structures are glibc's `elf.h` (`Elf{32,64}_Ehdr`, `Elf{32,64}_Shdr`, `Elf{32,64}_Verdef`,
//! `Elf{32,64}_Verdaux`, `Elf{32,64}_Verneed`, `Elf{32,64}_Vernaux`); the version structures are
//! the same in both classes (only `Half` and `Word` fields), the headers differ in their
//! address-sized fields. Sections are found by their headers, as `readelf -V` finds them.

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;

/// More sections than any shared object has (libibverbs 44: 29); a larger count is not one.
const MAX_SECTIONS: usize = 1024;
/// Version definitions or needs walked at most (libibverbs 44 defines 27).
const MAX_VERSIONS: usize = 4096;
/// `.rodata` strings kept at most, whatever the caller's filter lets through.
const MAX_KEPT_STRINGS: usize = 64;

/// `SHT_GNU_verdef`, `SHT_GNU_verneed` (`elf.h`).
const SHT_GNU_VERDEF: u32 = 0x6fff_fffd;
const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
/// `SHT_NOBITS`: a section with no bytes in the file (`.bss`).
const SHT_NOBITS: u32 = 8;
/// `VER_FLG_BASE`: the definition that names the object itself (its soname), not a version.
const VER_FLG_BASE: u16 = 0x1;

/// What a shared object's sections say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedObject {
    /// The versions it defines, in section order, without the base (soname) entry.
    pub definitions: Vec<String>,
    /// The versions it needs, by the file (soname) that must define them.
    pub needs: Vec<VersionNeed>,
    /// The `.rodata` strings the caller's filter kept, in file order, at most 64.
    pub strings: Vec<String>,
}

/// The versions a shared object needs of one other object (`Elf64_Verneed` and its
/// `Elf64_Vernaux` entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionNeed {
    /// `vn_file`: the soname, `libibverbs.so.1`.
    pub file: String,
    /// `vna_name` of each entry: `IBVERBS_1.1`, `IBVERBS_PRIVATE_34`.
    pub versions: Vec<String>,
}

impl SharedObject {
    /// Whether it defines `version`.
    pub fn defines(&self, version: &str) -> bool {
        self.definitions.iter().any(|defined| defined == version)
    }

    /// The versions it needs of `file`, none if it needs nothing of it.
    pub fn needs_of<'a>(&'a self, file: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.needs
            .iter()
            .filter(move |need| need.file == file)
            .flat_map(|need| need.versions.iter().map(String::as_str))
    }
}

/// Why bytes are not a shared object this reader can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    #[error("an ELF class or byte order that is not 32 or 64 bits, little or big endian")]
    Unsupported,
    #[error("malformed ELF: {0}")]
    Malformed(&'static str),
}

/// Reads `bytes` as an ELF object: its version definitions and needs, and the `.rodata`
/// strings (valid UTF-8, NUL-terminated) for which `keep` is true.
pub fn read_shared_object(
    bytes: &[u8],
    keep: impl Fn(&str) -> bool,
) -> Result<SharedObject, ElfError> {
    let elf = Elf::new(bytes)?;
    let sections = elf.sections()?;
    let mut object = SharedObject::default();
    for section in &sections {
        if matches!(section.kind, SHT_GNU_VERDEF | SHT_GNU_VERNEED) {
            elf.versions(section, &sections, &mut object)?;
        }
    }
    let names = sections.get(elf.shstrndx);
    let rodata = sections.iter().find(|section| {
        section.kind != SHT_NOBITS
            && names.is_some_and(|names| elf.string(names, section.name) == Ok(".rodata"))
    });
    if let Some(rodata) = rodata {
        let kept = elf
            .bytes_of(rodata)?
            .split(|&b| b == 0)
            .filter_map(|piece| std::str::from_utf8(piece).ok())
            .filter(|text| !text.is_empty() && keep(text))
            .take(MAX_KEPT_STRINGS);
        object.strings = kept.map(str::to_string).collect();
    }
    Ok(object)
}

/// The bytes, with how to read their fields.
struct Elf<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    class64: bool,
    shstrndx: usize,
}

/// The fields of a section header this reader uses.
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
}

impl<'a> Elf<'a> {
    fn new(bytes: &'a [u8]) -> Result<Self, ElfError> {
        if bytes.get(..4) != Some(b"\x7fELF") {
            return Err(ElfError::NotElf);
        }
        // e_ident[EI_CLASS] (1: ELFCLASS32, 2: ELFCLASS64), e_ident[EI_DATA] (1: LSB, 2: MSB).
        let (class64, big_endian) = match (bytes.get(4), bytes.get(5)) {
            (Some(1), Some(1)) => (false, false),
            (Some(1), Some(2)) => (false, true),
            (Some(2), Some(1)) => (true, false),
            (Some(2), Some(2)) => (true, true),
            _ => return Err(ElfError::Unsupported),
        };
        let mut elf = Elf {
            bytes,
            big_endian,
            class64,
            shstrndx: 0,
        };
        // e_shstrndx: 0x32 in Elf32_Ehdr, 0x3e in Elf64_Ehdr.
        elf.shstrndx = usize::from(elf.u16(if class64 { 0x3e } else { 0x32 })?);
        Ok(elf)
    }

    /// The section headers (`e_shoff`, `e_shentsize`, `e_shnum`).
    fn sections(&self) -> Result<Vec<Section>, ElfError> {
        let (shoff, shentsize, shnum) = if self.class64 {
            (self.u64(0x28)?, self.u16(0x3a)?, self.u16(0x3c)?)
        } else {
            (u64::from(self.u32(0x20)?), self.u16(0x2e)?, self.u16(0x30)?)
        };
        let shnum = usize::from(shnum);
        let minimum = if self.class64 { 64 } else { 40 };
        if shnum == 0 {
            return Ok(Vec::new());
        }
        if shnum > MAX_SECTIONS || usize::from(shentsize) < minimum {
            return Err(ElfError::Malformed("section header table"));
        }
        (0..shnum)
            .map(|index| {
                let at = (index as u64)
                    .checked_mul(u64::from(shentsize))
                    .and_then(|offset| offset.checked_add(shoff))
                    .ok_or(ElfError::Malformed("section header table"))?;
                let at = usize::try_from(at).map_err(|_| ElfError::Malformed("section header"))?;
                self.section(at)
            })
            .collect()
    }

    /// One `Elf32_Shdr` or `Elf64_Shdr` at `at`.
    fn section(&self, at: usize) -> Result<Section, ElfError> {
        let field = |offset: usize| at.checked_add(offset).ok_or(ElfError::Malformed("offset"));
        let (name, kind) = (self.u32(at)?, self.u32(field(4)?)?);
        Ok(if self.class64 {
            Section {
                name,
                kind,
                offset: self.u64(field(24)?)?,
                size: self.u64(field(32)?)?,
                link: self.u32(field(40)?)?,
                info: self.u32(field(44)?)?,
            }
        } else {
            Section {
                name,
                kind,
                offset: u64::from(self.u32(field(16)?)?),
                size: u64::from(self.u32(field(20)?)?),
                link: self.u32(field(24)?)?,
                info: self.u32(field(28)?)?,
            }
        })
    }

    /// The file bytes of a section.
    fn bytes_of(&self, section: &Section) -> Result<&'a [u8], ElfError> {
        let start = usize::try_from(section.offset).ok();
        let end = section.offset.checked_add(section.size);
        let end = end.and_then(|end| usize::try_from(end).ok());
        match (start, end) {
            (Some(start), Some(end)) => self.bytes.get(start..end),
            _ => None,
        }
        .ok_or(ElfError::Malformed("section outside the file"))
    }

    /// The NUL-terminated string at `offset` of a string table section.
    fn string(&self, table: &Section, offset: u32) -> Result<&'a str, ElfError> {
        let table = self.bytes_of(table)?;
        let rest = usize::try_from(offset)
            .ok()
            .and_then(|offset| table.get(offset..))
            .ok_or(ElfError::Malformed("string outside its table"))?;
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(ElfError::Malformed("string without its NUL"))?;
        std::str::from_utf8(&rest[..end]).map_err(|_| ElfError::Malformed("string not UTF-8"))
    }

    /// A version section's `sh_info` entries, by their names in the string table `sh_link`
    /// names. `.gnu.version_d`: `Elf64_Verdef` (`vd_version`, `vd_flags`, `vd_ndx`, `vd_cnt`
    /// as `Half`; `vd_hash`, `vd_aux`, `vd_next` as `Word`), each naming its version in its
    /// first `Elf64_Verdaux` (`vda_name`, `vda_next`). `.gnu.version_r`: `Elf64_Verneed`
    /// (`vn_version`, `vn_cnt` as `Half`; `vn_file`, `vn_aux`, `vn_next` as `Word`), each with
    /// `vn_cnt` `Elf64_Vernaux` (`vna_hash` `Word`, `vna_flags`, `vna_other` `Half`,
    /// `vna_name`, `vna_next` `Word`).
    fn versions(
        &self,
        section: &Section,
        sections: &[Section],
        object: &mut SharedObject,
    ) -> Result<(), ElfError> {
        let data = self.bytes_of(section)?;
        let strings = usize::try_from(section.link)
            .ok()
            .and_then(|link| sections.get(link))
            .ok_or(ElfError::Malformed("version section's string table"))?;
        let name = |at: usize| -> Result<String, ElfError> {
            Ok(self.string(strings, self.u32_in(data, at)?)?.to_string())
        };
        let count = section.info as usize;
        if section.kind == SHT_GNU_VERDEF {
            for at in self.chain(data, 0, count, 16)? {
                if self.u16_in(data, at.saturating_add(2))? & VER_FLG_BASE == 0 {
                    let aux = self.u32_in(data, at.saturating_add(12))? as usize;
                    object.definitions.push(name(at.saturating_add(aux))?);
                }
            }
            return Ok(());
        }
        let mut walked = 0;
        for at in self.chain(data, 0, count, 12)? {
            let entries = usize::from(self.u16_in(data, at.saturating_add(2))?);
            let aux = at.saturating_add(self.u32_in(data, at.saturating_add(8))? as usize);
            let versions = self.chain(data, aux, entries, 12)?;
            walked += versions.len();
            if walked > MAX_VERSIONS {
                return Err(ElfError::Malformed("too many version needs"));
            }
            object.needs.push(VersionNeed {
                file: name(at.saturating_add(4))?,
                versions: versions
                    .into_iter()
                    .map(|aux| name(aux.saturating_add(8)))
                    .collect::<Result<_, _>>()?,
            });
        }
        Ok(())
    }

    /// The offsets in `data` of a chain of at most `count` entries (and `MAX_VERSIONS`) from
    /// `first`, each giving the step to the next in its `Word` at `next` (0: the last).
    fn chain(
        &self,
        data: &[u8],
        first: usize,
        count: usize,
        next: usize,
    ) -> Result<Vec<usize>, ElfError> {
        let mut entries = Vec::new();
        let mut at = first;
        for _ in 0..count.min(MAX_VERSIONS) {
            entries.push(at);
            match self.u32_in(data, at.saturating_add(next))? {
                0 => break,
                step => at = at.saturating_add(step as usize),
            }
        }
        Ok(entries)
    }

    fn field<const N: usize>(data: &[u8], at: usize) -> Result<[u8; N], ElfError> {
        at.checked_add(N)
            .and_then(|end| data.get(at..end))
            .and_then(|field| field.try_into().ok())
            .ok_or(ElfError::Malformed("field outside its section"))
    }

    fn u16_in(&self, data: &[u8], at: usize) -> Result<u16, ElfError> {
        let raw = Self::field(data, at)?;
        Ok(if self.big_endian {
            u16::from_be_bytes(raw)
        } else {
            u16::from_le_bytes(raw)
        })
    }

    fn u32_in(&self, data: &[u8], at: usize) -> Result<u32, ElfError> {
        let raw = Self::field(data, at)?;
        Ok(if self.big_endian {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        })
    }

    fn u16(&self, at: usize) -> Result<u16, ElfError> {
        self.u16_in(self.bytes, at)
    }

    fn u32(&self, at: usize) -> Result<u32, ElfError> {
        self.u32_in(self.bytes, at)
    }

    fn u64(&self, at: usize) -> Result<u64, ElfError> {
        let raw = Self::field(self.bytes, at)?;
        Ok(if self.big_endian {
            u64::from_be_bytes(raw)
        } else {
            u64::from_le_bytes(raw)
        })
    }
}
