//! Shared objects written field by field as glibc's `elf.h` lays them out (both classes, both
//! byte orders), and the real libraries of Debian's rdma-core 44 and 33
//! (`exporter/tests/support/fetch-rdma-userspace.sh`).

use super::*;

/// An ELF object built from its parts: a `.dynstr`, one version definition section, one
/// version need section, a `.rodata` and the section names, in that order after the null
/// section.
pub(super) struct Builder {
    pub(super) class64: bool,
    pub(super) big_endian: bool,
    /// Each definition: `vd_flags` and its name.
    pub(super) definitions: Vec<(u16, &'static str)>,
    pub(super) needs: Vec<(&'static str, Vec<&'static str>)>,
    pub(super) rodata: Vec<u8>,
}

impl Builder {
    pub(super) fn libibverbs(class64: bool, big_endian: bool) -> Self {
        Builder {
            class64,
            big_endian,
            definitions: vec![
                (VER_FLG_BASE, "libibverbs.so.1"),
                (0, "IBVERBS_1.0"),
                (0, "IBVERBS_1.14"),
                (0, "IBVERBS_PRIVATE_34"),
            ],
            needs: vec![("libc.so.6", vec!["GLIBC_2.2.5", "GLIBC_2.34"])],
            rodata:
                b"%s\0/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so\0/etc/libibverbs.d\0"
                    .to_vec(),
        }
    }

    fn half(&self, value: u16) -> Vec<u8> {
        match self.big_endian {
            true => value.to_be_bytes().to_vec(),
            false => value.to_le_bytes().to_vec(),
        }
    }

    fn word(&self, value: u32) -> Vec<u8> {
        match self.big_endian {
            true => value.to_be_bytes().to_vec(),
            false => value.to_le_bytes().to_vec(),
        }
    }

    /// An address-sized field (`Elf32_Off`/`Elf64_Off`, `Elf64_Xword`).
    fn address(&self, value: u64) -> Vec<u8> {
        match (self.class64, self.big_endian) {
            (true, true) => value.to_be_bytes().to_vec(),
            (true, false) => value.to_le_bytes().to_vec(),
            (false, _) => self.word(value as u32),
        }
    }

    pub(super) fn build(&self) -> Vec<u8> {
        let mut dynstr = vec![0u8];
        let mut intern = |text: &str| {
            let at = dynstr.len() as u32;
            dynstr.extend_from_slice(text.as_bytes());
            dynstr.push(0);
            at
        };
        // Elf64_Verdef (20 bytes) then its one Elf64_Verdaux (8 bytes), chained by vd_next.
        let mut verdef = Vec::new();
        for (index, (flags, name)) in self.definitions.iter().enumerate() {
            let last = index + 1 == self.definitions.len();
            let name = intern(name);
            verdef.extend(self.half(1)); // vd_version
            verdef.extend(self.half(*flags));
            verdef.extend(self.half(index as u16 + 1)); // vd_ndx
            verdef.extend(self.half(1)); // vd_cnt
            verdef.extend(self.word(0)); // vd_hash
            verdef.extend(self.word(20)); // vd_aux
            verdef.extend(self.word(if last { 0 } else { 28 })); // vd_next
            verdef.extend(self.word(name)); // vda_name
            verdef.extend(self.word(0)); // vda_next
        }
        // Elf64_Verneed (16 bytes) then its Elf64_Vernaux entries (16 bytes each).
        let mut verneed = Vec::new();
        for (index, (file, versions)) in self.needs.iter().enumerate() {
            let last = index + 1 == self.needs.len();
            let file = intern(file);
            let size = 16 + 16 * versions.len() as u32;
            verneed.extend(self.half(1)); // vn_version
            verneed.extend(self.half(versions.len() as u16));
            verneed.extend(self.word(file));
            verneed.extend(self.word(16)); // vn_aux
            verneed.extend(self.word(if last { 0 } else { size })); // vn_next
            for (aux, version) in versions.iter().enumerate() {
                let name = intern(version);
                let last = aux + 1 == versions.len();
                verneed.extend(self.word(0)); // vna_hash
                verneed.extend(self.half(0)); // vna_flags
                verneed.extend(self.half(aux as u16 + 2)); // vna_other
                verneed.extend(self.word(name));
                verneed.extend(self.word(if last { 0 } else { 16 })); // vna_next
            }
        }
        let shstrtab = b"\0.dynstr\0.gnu.version_d\0.gnu.version_r\0.rodata\0.shstrtab\0".to_vec();
        // (sh_name, sh_type, sh_link, sh_info, bytes); SHT_STRTAB 3, SHT_PROGBITS 1.
        let sections: [(u32, u32, u32, u32, &[u8]); 5] = [
            (1, 3, 0, 0, &dynstr),
            (9, SHT_GNU_VERDEF, 1, self.definitions.len() as u32, &verdef),
            (24, SHT_GNU_VERNEED, 1, self.needs.len() as u32, &verneed),
            (39, 1, 0, 0, &self.rodata),
            (47, 3, 0, 0, &shstrtab),
        ];
        let header_size = if self.class64 { 64 } else { 52 };
        let mut body = Vec::new();
        let mut offsets = Vec::new();
        for (.., bytes) in &sections {
            offsets.push(header_size + body.len() as u64);
            body.extend_from_slice(bytes);
        }
        let shoff = header_size + body.len() as u64;
        let shentsize: u16 = if self.class64 { 64 } else { 40 };
        // Elf64_Ehdr / Elf32_Ehdr.
        let mut elf = b"\x7fELF".to_vec();
        elf.push(if self.class64 { 2 } else { 1 });
        elf.push(if self.big_endian { 2 } else { 1 });
        elf.extend([1, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // EI_VERSION, ABI, padding
        elf.extend(self.half(3)); // e_type: ET_DYN
        elf.extend(self.half(62)); // e_machine: EM_X86_64
        elf.extend(self.word(1)); // e_version
        elf.extend(self.address(0)); // e_entry
        elf.extend(self.address(0)); // e_phoff
        elf.extend(self.address(shoff));
        elf.extend(self.word(0)); // e_flags
        elf.extend(self.half(header_size as u16)); // e_ehsize
        elf.extend(self.half(0)); // e_phentsize
        elf.extend(self.half(0)); // e_phnum
        elf.extend(self.half(shentsize));
        elf.extend(self.half(sections.len() as u16 + 1)); // e_shnum
        elf.extend(self.half(sections.len() as u16)); // e_shstrndx: the last
        assert_eq!(elf.len() as u64, header_size);
        elf.extend(body);
        elf.extend(vec![0; usize::from(shentsize)]); // the null section
        for ((name, kind, link, info, bytes), offset) in sections.iter().zip(offsets) {
            let start = elf.len();
            elf.extend(self.word(*name));
            elf.extend(self.word(*kind));
            elf.extend(self.address(0)); // sh_flags
            elf.extend(self.address(0)); // sh_addr
            elf.extend(self.address(offset));
            elf.extend(self.address(bytes.len() as u64));
            elf.extend(self.word(*link));
            elf.extend(self.word(*info));
            elf.extend(self.address(1)); // sh_addralign
            elf.extend(self.address(0)); // sh_entsize
            assert_eq!(elf.len() - start, usize::from(shentsize));
        }
        elf
    }
}

fn provider_paths(text: &str) -> bool {
    text.contains("-rdmav")
}

#[test]
fn every_class_and_byte_order_reads_the_same() {
    for (class64, big_endian) in [(true, false), (true, true), (false, false), (false, true)] {
        let bytes = Builder::libibverbs(class64, big_endian).build();
        let object = read_shared_object(&bytes, provider_paths).unwrap();
        assert_eq!(
            object.definitions,
            ["IBVERBS_1.0", "IBVERBS_1.14", "IBVERBS_PRIVATE_34"],
            "class64 {class64}, big endian {big_endian}"
        );
        assert_eq!(
            object.needs,
            [VersionNeed {
                file: "libc.so.6".into(),
                versions: vec!["GLIBC_2.2.5".into(), "GLIBC_2.34".into()],
            }]
        );
        assert_eq!(
            object.strings,
            ["/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so"]
        );
        assert!(object.defines("IBVERBS_PRIVATE_34"));
        assert!(
            !object.defines("libibverbs.so.1"),
            "the base entry is no version"
        );
    }
}

#[test]
fn a_provider_needs_the_private_version_of_libibverbs() {
    let provider = Builder {
        definitions: vec![(VER_FLG_BASE, "librxe-rdmav34.so")],
        needs: vec![
            ("libc.so.6", vec!["GLIBC_2.2.5"]),
            ("libibverbs.so.1", vec!["IBVERBS_1.1", "IBVERBS_PRIVATE_34"]),
        ],
        rodata: Vec::new(),
        ..Builder::libibverbs(true, false)
    };
    let object = read_shared_object(&provider.build(), |_| true).unwrap();
    assert!(object.definitions.is_empty());
    assert!(object.strings.is_empty());
    let needed: Vec<_> = object.needs_of("libibverbs.so.1").collect();
    assert_eq!(needed, ["IBVERBS_1.1", "IBVERBS_PRIVATE_34"]);
}

#[test]
fn what_is_not_an_elf_shared_object_is_an_error() {
    assert_eq!(read_shared_object(b"", |_| true), Err(ElfError::NotElf));
    assert_eq!(
        read_shared_object(b"#!/bin/sh\n", |_| true),
        Err(ElfError::NotElf)
    );
    assert_eq!(
        read_shared_object(b"\x7fELF\x03\x01", |_| true),
        Err(ElfError::Unsupported)
    );
    let whole = Builder::libibverbs(true, false).build();
    // Cut inside the last section header's sh_info, and inside the version sections' bytes.
    for cut in [whole.len() - 18, 0x40 + 20] {
        assert!(
            matches!(
                read_shared_object(&whole[..cut], |_| true),
                Err(ElfError::Malformed(_))
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn a_version_chain_that_leaves_its_section_is_refused() {
    let mut builder = Builder::libibverbs(true, false);
    builder.definitions = vec![(0, "IBVERBS_1.0"), (0, "IBVERBS_1.1")];
    let mut bytes = builder.build();
    // .gnu.version_d follows the header (64 bytes) and .dynstr: its NUL, both names, then the
    // need's file and versions. The first Elf64_Verdef's vd_next is at 16.
    let dynstr = 1 + [
        "IBVERBS_1.0",
        "IBVERBS_1.1",
        "libc.so.6",
        "GLIBC_2.2.5",
        "GLIBC_2.34",
    ]
    .iter()
    .map(|name| name.len() + 1)
    .sum::<usize>();
    let next = 64 + dynstr + 16;
    assert_eq!(bytes[next..next + 4], 28u32.to_le_bytes());
    bytes[next..next + 4].copy_from_slice(&0xffff_ff00u32.to_le_bytes());
    assert_eq!(
        read_shared_object(&bytes, |_| true),
        Err(ElfError::Malformed("field outside its section"))
    );
}

/// Debian's rdma-core packages, unpacked by `fetch-rdma-userspace.sh`.
pub(crate) fn rdma_generation(release: &str) -> std::path::PathBuf {
    let root = std::env::var_os("HPCNODE_RDMA_USERSPACE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/rdma-userspace")
        })
        .join(release);
    assert!(
        root.join("usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists(),
        "{} lacks rdma-core: run exporter/tests/support/fetch-rdma-userspace.sh (tests/setup.sh does)",
        root.display()
    );
    root
}

fn real(release: &str, library: &str) -> SharedObject {
    let path = rdma_generation(release)
        .join("usr/lib/x86_64-linux-gnu")
        .join(library);
    read_shared_object(&std::fs::read(path).unwrap(), provider_paths).unwrap()
}

#[test]
fn debian_libibverbs_44_and_33_define_their_private_abi_and_name_their_provider_dir() {
    let bookworm = real("bookworm", "libibverbs.so.1");
    assert!(bookworm.defines("IBVERBS_1.14") && bookworm.defines("IBVERBS_PRIVATE_34"));
    assert!(!bookworm.defines("IBVERBS_PRIVATE_33"));
    // `lib%s-rdmav34.so`, the search path's name, is the path's tail: one string in .rodata.
    assert_eq!(
        bookworm.strings,
        ["/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav34.so"]
    );
    let bullseye = real("bullseye", "libibverbs.so.1");
    assert!(bullseye.defines("IBVERBS_PRIVATE_33") && !bullseye.defines("IBVERBS_PRIVATE_34"));
    assert!(bullseye
        .strings
        .contains(&"/usr/lib/x86_64-linux-gnu/libibverbs/lib%s-rdmav33.so".into()));
}

#[test]
fn debian_providers_need_the_private_abi_they_were_built_for() {
    for (release, provider, version) in [
        (
            "bookworm",
            "libibverbs/librxe-rdmav34.so",
            "IBVERBS_PRIVATE_34",
        ),
        (
            "bookworm",
            "libibverbs/libmlx5-rdmav34.so",
            "IBVERBS_PRIVATE_34",
        ),
        (
            "bullseye",
            "libibverbs/libmlx5-rdmav33.so",
            "IBVERBS_PRIVATE_33",
        ),
    ] {
        let object = real(release, provider);
        assert!(
            object
                .needs_of("libibverbs.so.1")
                .any(|need| need == version),
            "{release} {provider}: {:?}",
            object.needs
        );
    }
}
