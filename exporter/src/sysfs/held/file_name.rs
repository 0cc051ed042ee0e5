//! A held file's name, kept inline when short, so the compare each read makes stays in cache.

/// A held file's name, inline when short (nearly every attribute's): each read compares it
/// with the name asked for, and a name elsewhere on the heap costs that compare a cache miss.
pub(super) enum FileName {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Elsewhere(Box<[u8]>),
}

/// The longest name kept inline: `FileName` fits in 40 bytes.
pub(super) const INLINE_NAME: usize = 38;

impl FileName {
    pub(super) fn new(name: &str) -> FileName {
        let name = name.as_bytes();
        match u8::try_from(name.len()) {
            Ok(len) if name.len() <= INLINE_NAME => {
                let mut bytes = [0; INLINE_NAME];
                bytes[..name.len()].copy_from_slice(name);
                FileName::Inline { len, bytes }
            }
            _ => FileName::Elsewhere(name.into()),
        }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            FileName::Inline { len, bytes } => &bytes[..usize::from(*len)],
            FileName::Elsewhere(name) => name,
        }
    }
}

// Hashed and compared as its bytes, so that a map of them is looked up by `&[u8]`.
impl std::hash::Hash for FileName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for FileName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for FileName {}

impl std::borrow::Borrow<[u8]> for FileName {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}
