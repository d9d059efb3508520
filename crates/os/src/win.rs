//! Small safe wrappers over the Win32 calls the Windows modules share: owned handles, the
//! current user's SID, and a DACL that admits that user alone.

use std::ffi::OsStr;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{HANDLE, INVALID_HANDLE_VALUE, LocalFree};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{GetTokenInformation, PSECURITY_DESCRIPTOR, TOKEN_QUERY, TOKEN_USER, TokenUser};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// `what` failed, with the OS's last error.
pub(crate) fn last_error(what: &str) -> std::io::Error {
    let e = std::io::Error::last_os_error();
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Takes ownership of a handle a call returned; null or INVALID_HANDLE_VALUE is `what`'s error.
#[allow(unsafe_code)]
pub(crate) fn owned(handle: HANDLE, what: &str) -> std::io::Result<OwnedHandle> {
    if handle.is_null() || handle == INVALID_HANDLE_VALUE {
        return Err(last_error(what));
    }
    // SAFETY: the handle is valid (checked above) and was just returned to us to own.
    Ok(unsafe { OwnedHandle::from_raw_handle(handle) })
}

/// `s` as a NUL-terminated UTF-16 string.
pub(crate) fn wide(s: &OsStr) -> Vec<u16> {
    s.encode_wide().chain(Some(0)).collect()
}

/// The SID of the user this process runs as, as a string (`S-1-5-21-…`), read once.
pub(crate) fn user_sid() -> std::io::Result<String> {
    static SID: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    #[allow(unsafe_code)]
    // SAFETY: GetCurrentProcess returns a pseudo-handle valid in this process.
    let me = || sid_of_process(unsafe { GetCurrentProcess() }).map_err(|e| e.to_string());
    SID.get_or_init(me).clone().map_err(std::io::Error::other)
}

/// The SID of the user process `process` (a handle with query access) runs as.
#[allow(unsafe_code)]
pub(crate) fn sid_of_process(process: HANDLE) -> std::io::Result<String> {
    use std::os::windows::io::AsRawHandle;
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: `process` is valid for the call; `token` receives a handle we then own.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &mut token) } == 0 {
        return Err(last_error("cannot open a process's token"));
    }
    let token = owned(token, "cannot open a process's token")?;
    let mut buf = vec![0u64; 64]; // 512 bytes, aligned for TOKEN_USER
    let mut len = 0u32;
    // SAFETY: the buffer is valid for its length in bytes; the call writes at most that many.
    let ok = unsafe {
        GetTokenInformation(token.as_raw_handle(), TokenUser, buf.as_mut_ptr().cast(), (buf.len() * 8) as u32, &mut len)
    };
    if ok == 0 {
        return Err(last_error("cannot read this process's user"));
    }
    // SAFETY: on success the buffer starts with a TOKEN_USER whose SID points into the buffer.
    let sid = unsafe { (*(buf.as_ptr() as *const TOKEN_USER)).User.Sid };
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: `sid` is valid while `buf` lives; `text` receives a LocalAlloc'd string we free.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 {
        return Err(last_error("cannot write this process's SID"));
    }
    // SAFETY: `text` is a NUL-terminated UTF-16 string from the call above.
    let s = unsafe {
        let len = (0..).take_while(|i| *text.add(*i) != 0).count();
        let s = String::from_utf16_lossy(std::slice::from_raw_parts(text, len));
        LocalFree(text.cast());
        s
    };
    Ok(s)
}

/// A self-relative security descriptor made from SDDL, freed on drop.
pub(crate) struct Descriptor(PSECURITY_DESCRIPTOR);

// SAFETY: the descriptor is plain memory owned by this value alone.
#[allow(unsafe_code)]
unsafe impl Send for Descriptor {}
#[allow(unsafe_code)]
unsafe impl Sync for Descriptor {}

impl Descriptor {
    /// A descriptor whose DACL admits the current user alone (full access, inherited by what a
    /// directory holds) and nobody else, not inherited from the parent.
    #[allow(unsafe_code)]
    pub(crate) fn user_only() -> std::io::Result<Descriptor> {
        let sddl = format!("D:P(A;OICI;GA;;;{})", user_sid()?);
        let wide = wide(OsStr::new(&sddl));
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: `wide` is NUL-terminated; `sd` receives a LocalAlloc'd descriptor we free.
        let ok = unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                wide.as_ptr(),
                SDDL_REVISION_1,
                &mut sd,
                std::ptr::null_mut(),
            )
        };
        if ok == 0 {
            return Err(last_error("cannot make a security descriptor for this user"));
        }
        Ok(Descriptor(sd))
    }

    pub(crate) fn as_ptr(&self) -> PSECURITY_DESCRIPTOR {
        self.0
    }
}

impl Drop for Descriptor {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: allocated by ConvertStringSecurityDescriptorToSecurityDescriptorW.
        unsafe { LocalFree(self.0) };
    }
}

/// Whether this process runs under Wine, which lacks a few Windows behaviours the tests would
/// otherwise check (docs/platforms.md lists them).
#[allow(unsafe_code, dead_code)]
pub(crate) fn under_wine() -> bool {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
    let ntdll = wide(OsStr::new("ntdll.dll"));
    // SAFETY: a module every process has loaded; the name is a NUL-terminated ASCII string.
    unsafe {
        let module = GetModuleHandleW(ntdll.as_ptr());
        !module.is_null() && GetProcAddress(module, c"wine_get_version".as_ptr().cast()).is_some()
    }
}
