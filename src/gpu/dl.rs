//! Driver libraries opened by name (libloading, the loader nvml-wrapper and cudarc use):
//! whether one loads, where from, and which optional entry points it has — without a binding
//! crate that panics on a missing symbol.

use libloading::os::unix::{Library as Lib, RTLD_LAZY, RTLD_LOCAL};
use std::ffi::c_void;
use std::path::PathBuf;

pub struct Library {
    lib: Lib,
    /// The name it was opened by ("libnvidia-ml.so.1").
    pub name: String,
}

impl Library {
    /// dlopen by name (the loader's search: LD_LIBRARY_PATH, ld.so.cache, system dirs).
    /// Lazy binding: a missing symbol is found by `has`, never at load. The error is the
    /// loader's own sentence ("libx.so: cannot open shared object file: ...").
    pub fn open(name: &str) -> Result<Library, String> {
        // SAFETY: loading runs the library's initialisers; the names opened are the NVIDIA
        // driver's and CUDA's own libraries, which is what loading them is for.
        let lib =
            unsafe { Lib::open(Some(name), RTLD_LAZY | RTLD_LOCAL) }.map_err(|e| e.to_string())?;
        Ok(Library {
            lib,
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
    fn address(&self, name: &str) -> Option<usize> {
        // SAFETY: the symbol is read as an untyped address, never called or dereferenced.
        let s = unsafe { self.lib.get::<*mut c_void>(name.as_bytes()) }.ok()?;
        Some(*s as usize).filter(|&a| a != 0)
    }

    pub fn has(&self, name: &str) -> bool {
        self.address(name).is_some()
    }

    /// The exported function `name` as `F`, or None when the library lacks it. The pointer
    /// stays valid while `self` is alive.
    ///
    /// # Safety
    /// `F` must be the function's true C signature.
    pub unsafe fn function<F: Copy>(&self, name: &str) -> Option<F> {
        // SAFETY: the caller vouches that `F` is the symbol's true signature.
        unsafe { self.lib.get::<F>(name.as_bytes()) }
            .ok()
            .map(|s| *s)
    }

    /// Which of `names` the library does not export.
    pub fn missing<'a>(&self, names: &[&'a str]) -> Vec<&'a str> {
        names.iter().copied().filter(|n| !self.has(n)).collect()
    }

    /// The file the loader picked: the mapping that holds one of its symbols.
    pub fn path_via(&self, symbol: &str) -> Option<PathBuf> {
        let at = self.address(symbol)?;
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        mapped_file(&maps, at)
    }
}

/// The file of the `/proc/PID/maps` line whose range holds `at`.
fn mapped_file(maps: &str, at: usize) -> Option<PathBuf> {
    maps.lines().find_map(|line| {
        let mut f = line.split_ascii_whitespace();
        let (start, end) = f.next()?.split_once('-')?;
        let range = usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?;
        // perms, offset, dev, inode, then the path (which may hold spaces).
        let path = line.splitn(6, |c: char| c.is_ascii_whitespace()).nth(5)?;
        let path = path.trim_start();
        (range.contains(&at) && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_libc_finds_symbols_and_explains_failures() {
        let l = Library::open("libc.so.6").unwrap();
        assert!(l.has("malloc"));
        assert_eq!(
            l.missing(&["malloc", "no_such_fn_roger"]),
            ["no_such_fn_roger"]
        );
        // SAFETY: getpid's C signature.
        let getpid = unsafe { l.function::<unsafe extern "C" fn() -> i32>("getpid") }.unwrap();
        // SAFETY: getpid takes nothing and cannot fail.
        assert_eq!(unsafe { getpid() } as u32, std::process::id());
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

    #[test]
    fn finds_the_mapping_of_an_address() {
        let maps = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1234   /usr/bin/roger
7f0000000000-7f0000100000 r-xp 00028000 08:01 5678   /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03
7f0000100000-7f0000200000 rw-p 00000000 00:00 0 
7f0000200000-7f0000300000 r-xp 00000000 08:01 9   /opt/my libs/libcuda.so.1
";
        assert_eq!(
            mapped_file(maps, 0x7f0000000010).unwrap(),
            PathBuf::from("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03")
        );
        assert_eq!(
            mapped_file(maps, 0x7f0000200000).unwrap(),
            PathBuf::from("/opt/my libs/libcuda.so.1")
        );
        assert_eq!(mapped_file(maps, 0x7f0000100010), None); // anonymous
        assert_eq!(mapped_file(maps, 0x10), None);
    }
}
