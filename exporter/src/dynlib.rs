//! Shared libraries loaded at run time instead of linked (libibverbs for the verbs probe,
//! libmicmgmt for mic), so that the binary builds and runs on nodes that lack them, and their
//! functions looked up by name.

use std::os::unix::ffi::OsStrExt;

/// A library loaded with `dlopen`; it stays loaded while this value lives.
pub struct Library {
    library: libloading::Library,
    /// As the caller gave it (a path or a soname), to name it in errors.
    name: String,
}

/// Why a library or one of its functions is not available.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load {library}: {reason}")]
    Open { library: String, reason: String },
    #[error("{library} lacks the symbol {symbol}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
    },
}

impl Library {
    /// Loads `name`: a path, or a soname that the dynamic linker finds.
    ///
    /// # Safety
    /// Loading runs the library's initialisers in this process: they must be sound to run here.
    pub unsafe fn open(name: &str) -> Result<Library, LoadError> {
        // SAFETY: the caller vouches for the library's initialisers.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => Ok(Library {
                library,
                name: name.to_string(),
            }),
            Err(err) => Err(LoadError::Open {
                library: name.to_string(),
                reason: err.to_string(),
            }),
        }
    }

    /// The function `symbol`, as the function pointer type `F`.
    ///
    /// # Safety
    /// `F` is the type the library's header declares for `symbol`, and the pointer is not
    /// called once this `Library` is dropped.
    pub unsafe fn function<F: Copy>(&self, symbol: &'static str) -> Result<F, LoadError> {
        // SAFETY: the caller vouches for `F` and for how long the copied pointer is used.
        unsafe { self.library.get::<F>(symbol.as_bytes()) }
            .map(|function| *function)
            .map_err(|_| LoadError::MissingSymbol {
                library: self.name.clone(),
                symbol,
            })
    }
}

/// The file the dynamic linker loaded the function at `address` from (`dladdr`'s
/// `dli_fname`): the path it chose, as it would for an application. An address, not a
/// pointer: dladdr only looks it up in the loader's tables, never reads it.
pub fn loaded_from(address: usize) -> Option<std::path::PathBuf> {
    let address = address as *const std::ffi::c_void;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the loader's own tables for `address` and writes `info`,
    // a live, zeroed out-parameter; a nonzero return means it filled it.
    let found = unsafe { libc::dladdr(address, info.as_mut_ptr()) };
    // SAFETY: zeroed, then filled by dladdr when found: every field is initialised.
    let info = unsafe { info.assume_init() };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-NULL dli_fname is the NUL-terminated name the loader keeps for the loaded
    // object, live while it stays loaded (it is, while the caller holds its function).
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::ffi::OsStr::from_bytes(name.to_bytes()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_cannot_load_is_named() {
        // SAFETY: there is no such file, so no initialiser runs.
        let err = unsafe { Library::open("/nonexistent/libfoo.so.1") }
            .err()
            .unwrap();
        let text = err.to_string();
        assert!(
            text.starts_with("cannot load /nonexistent/libfoo.so.1: "),
            "{text}"
        );
    }

    #[test]
    fn functions_are_found_by_name_and_a_missing_one_is_named() {
        // SAFETY: libc is loaded in this process already; opening it again runs nothing.
        let c_library = unsafe { Library::open("libc.so.6") }.unwrap();
        // SAFETY: `getpid` is `pid_t getpid(void)`; `c_library` outlives the call.
        let pid = unsafe {
            let getpid: unsafe extern "C" fn() -> libc::pid_t =
                c_library.function("getpid").unwrap();
            getpid()
        };
        assert_eq!(u32::try_from(pid), Ok(std::process::id()));
        let path = loaded_from(libc::getpid as *const () as usize).unwrap();
        assert!(
            path.to_string_lossy().contains("libc.so.6"),
            "{}",
            path.display()
        );
        // SAFETY: the lookup fails, so no pointer is made.
        let missing = unsafe { c_library.function::<unsafe extern "C" fn()>("no_such_function") };
        assert_eq!(
            missing.err().unwrap().to_string(),
            "libc.so.6 lacks the symbol no_such_function"
        );
    }
}
