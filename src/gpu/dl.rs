//! Minimal dlopen/dlsym: whether a driver library loads, where from, and which optional entry
//! points it has — without a binding crate that panics on a missing symbol.

use std::ffi::{c_void, CStr, CString};
use std::path::PathBuf;

pub struct Library {
    handle: *mut c_void,
    /// The name it was opened by ("libnvidia-ml.so.1").
    pub name: String,
}

// SAFETY: a dlopen handle may be used from any thread; dlsym/dlclose are thread-safe.
unsafe impl Send for Library {}

fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a thread-local C string valid until the next dl call.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    /// dlopen by name (the loader's search: LD_LIBRARY_PATH, ld.so.cache, system dirs).
    /// Lazy binding: a missing symbol is found by `symbol`, never at load.
    pub fn open(name: &str) -> Result<Library, String> {
        let c = CString::new(name).map_err(|_| format!("bad library name {name:?}"))?;
        // SAFETY: c is a valid C string; the handle is closed in Drop.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(last_error());
        }
        Ok(Library {
            handle,
            name: name.to_string(),
        })
    }

    /// The first of `names` that loads, or every name's error.
    pub fn open_first(names: &[&str]) -> Result<Library, String> {
        let mut errors = Vec::new();
        for n in names {
            match Library::open(n) {
                Ok(l) => return Ok(l),
                Err(e) => errors.push(e),
            }
        }
        Err(errors.join("; "))
    }

    /// The address of an exported symbol, or None when the library lacks it.
    pub fn symbol(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: handle is live (closed only in Drop); c is a valid C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    }

    /// Which of `names` the library does not export.
    pub fn missing<'a>(&self, names: &[&'a str]) -> Vec<&'a str> {
        names
            .iter()
            .copied()
            .filter(|n| self.symbol(n).is_none())
            .collect()
    }

    /// The file the loader picked, found through one of its symbols.
    pub fn path_via(&self, symbol: &str) -> Option<PathBuf> {
        let p = self.symbol(symbol)?;
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: p is an address inside this loaded library; info is a valid out-pointer.
        if unsafe { libc::dladdr(p, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dli_fname is a C string owned by the loader, valid while the library is loaded.
        let s = unsafe { CStr::from_ptr(info.dli_fname) };
        Some(PathBuf::from(s.to_string_lossy().into_owned()))
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: handle came from dlopen and is closed exactly once.
        unsafe {
            libc::dlclose(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_libc_finds_symbols_and_explains_failures() {
        let l = Library::open("libc.so.6").unwrap();
        assert!(l.symbol("malloc").is_some());
        assert_eq!(
            l.missing(&["malloc", "no_such_fn_roger"]),
            ["no_such_fn_roger"]
        );
        assert!(l
            .path_via("malloc")
            .unwrap()
            .to_string_lossy()
            .contains("libc"));
        let e = Library::open_first(&["libroger-nope.so.1", "libroger-nope.so"])
            .err()
            .unwrap();
        assert!(
            e.contains("libroger-nope.so.1") && e.contains("libroger-nope.so:"),
            "{e}"
        );
    }
}
