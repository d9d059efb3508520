//! Files and directories only their user may read: secrets (tokens, sign-ins, remembered
//! answers), logs, sockets, and the start lock.
//!
//! - Unix: files made 0600 and directories 0700 at creation (never through the process-wide
//!   umask, which other threads share); an existing directory must be this user's, and one open
//!   to others is narrowed.
//! - Windows: a protected DACL that admits the current user alone, set on what switchyard makes
//!   (files under `%LOCALAPPDATA%` inherit as much already; the explicit DACL holds wherever
//!   the file is).
//!
//! Locks are `std::fs::File::try_lock` on every OS (flock; LockFileEx), released when the file
//! closes, including when the process dies.

use std::path::Path;

/// Options that create a file only its user may read and write (0600; a user-only DACL is set
/// by [`restrict`] after creation on Windows).
pub fn private_options() -> std::fs::OpenOptions {
    #[allow(unused_mut)]
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Narrows an existing file or directory to its user: 0600 or 0700 on Unix, a user-only DACL
/// on Windows.
pub fn restrict(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = if std::fs::symlink_metadata(path)?.is_dir() { 0o700 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    }
    #[cfg(windows)]
    {
        restrict_windows(path)
    }
}

#[cfg(windows)]
#[allow(unsafe_code)]
fn restrict_windows(path: &Path) -> std::io::Result<()> {
    use windows_sys::Win32::Security::Authorization::{SE_FILE_OBJECT, SetNamedSecurityInfoW};
    use windows_sys::Win32::Security::{
        ACL, DACL_SECURITY_INFORMATION, GetSecurityDescriptorDacl, PROTECTED_DACL_SECURITY_INFORMATION,
    };
    let descriptor = crate::win::Descriptor::user_only()?;
    let (mut present, mut defaulted) = (0, 0);
    let mut dacl: *mut ACL = std::ptr::null_mut();
    // SAFETY: the descriptor is valid while `descriptor` lives; the outputs are plain locals.
    if unsafe { GetSecurityDescriptorDacl(descriptor.as_ptr(), &mut present, &mut dacl, &mut defaulted) } == 0 {
        return Err(crate::win::last_error("cannot read the user-only DACL"));
    }
    let name = crate::win::wide(path.as_os_str());
    // SAFETY: `name` is NUL-terminated; `dacl` points into `descriptor`, alive for the call.
    let code = unsafe {
        SetNamedSecurityInfoW(
            name.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            dacl,
            std::ptr::null(),
        )
    };
    if code != 0 {
        return Err(std::io::Error::from_raw_os_error(code as i32));
    }
    Ok(())
}

/// Writes `bytes` to `path` as a private file (made private before the first byte on Unix,
/// right after creation on Windows), replacing what was there.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = private_options().write(true).create(true).truncate(true).open(path)?;
    restrict(path)?;
    file.write_all(bytes)
}

/// Replaces `path` with `bytes` as a private file, through a temporary file beside it: a reader
/// sees the old content or the new, never half of it, and nothing half-written is left.
pub fn replace_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = private_options().write(true).create(true).truncate(true).open(&tmp)?;
    restrict(&tmp)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all()).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether others than its user may read or change `meta`'s file (Unix: any group or other
/// bit; Windows: never judged from metadata, which carries no ACL, so false).
pub fn open_to_others(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o077 != 0
    }
    #[cfg(windows)]
    {
        let _ = meta;
        false
    }
}

/// Whether this user may write `path` (Unix: `access(W_OK)`; Windows: the file is not
/// read-only, its ACL being judged when it is opened).
pub fn may_write(path: &Path) -> bool {
    #[cfg(unix)]
    {
        rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
    }
    #[cfg(windows)]
    {
        std::fs::metadata(path).is_ok_and(|m| !m.permissions().readonly())
    }
}

/// Locks directory `dir` against other processes doing the same, waiting for the lock, which
/// goes with the returned file. Unix: flock on the directory itself, so nothing is left behind.
/// Windows cannot lock a directory: `dir\.lock` is locked instead.
pub fn lock_dir(dir: &Path) -> std::io::Result<std::fs::File> {
    #[cfg(unix)]
    let file = std::fs::File::open(dir)?;
    #[cfg(windows)]
    let file = private_options().write(true).create(true).truncate(false).open(dir.join(".lock"))?;
    file.lock()?;
    Ok(file)
}

/// `std::fs::canonicalize`, written as a user would write the path: on Windows without the
/// `\\?\` prefix where the path needs none (a drive path; `\\?\UNC\` back to `\\`), so it can
/// go into a client's config, a command line or a message (cmd.exe does not take `\\?\`).
pub fn canonicalize(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let real = std::fs::canonicalize(path)?;
    Ok(plain(real))
}

/// `path` without a verbatim prefix it does not need (see [`canonicalize`]).
pub fn plain(path: std::path::PathBuf) -> std::path::PathBuf {
    let text = path.to_string_lossy();
    if let Some(rest) = text.strip_prefix(r"\\?\UNC\") {
        return std::path::PathBuf::from(format!(r"\\{rest}"));
    }
    match text.strip_prefix(r"\\?\") {
        Some(rest) if rest.as_bytes().get(1) == Some(&b':') && rest.len() < 260 => std::path::PathBuf::from(rest),
        _ => path,
    }
}

/// How a file's access reads in a message: `mode 644` on Unix, `its ACL` on Windows.
pub fn access_text(meta: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        format!("mode {:o}", meta.permissions().mode() & 0o777)
    }
    #[cfg(windows)]
    {
        let _ = meta;
        "its ACL".to_string()
    }
}

/// Why a directory cannot serve as a private one.
#[derive(Debug)]
pub enum NotPrivate {
    /// It could not be made or read.
    Io(std::io::Error),
    /// Something that is not a directory is there.
    NotADirectory,
    /// It belongs to another user (uid on Unix).
    Foreign { owner: u32, me: u32 },
}

/// Makes `dir` (and its parents) if missing, private to this user; checks that an existing one
/// is a directory of this user's (Unix), and narrows one open to others.
pub fn private_dir(dir: &Path) -> Result<(), NotPrivate> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(NotPrivate::Io)?;
    }
    #[allow(unused_mut)]
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    let made = match builder.create(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(NotPrivate::Io(e)),
    };
    let meta = std::fs::symlink_metadata(dir).map_err(NotPrivate::Io)?;
    if !meta.is_dir() {
        return Err(NotPrivate::NotADirectory);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::getuid().as_raw();
        if meta.uid() != me {
            return Err(NotPrivate::Foreign { owner: meta.uid(), me });
        }
    }
    if made || open_to_others(&meta) {
        restrict(dir).map_err(NotPrivate::Io)?;
    }
    Ok(())
}

/// Takes an exclusive lock on `file` without waiting: Ok(true) taken, Ok(false) held elsewhere.
pub fn try_lock(file: &std::fs::File) -> std::io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// An exclusive lock on a file that exists only while someone holds it: on Unix the holder
/// removes the file before it lets go, and a taker checks that the file it locked is still the
/// one at the path (a taker that opened it before it was removed locks a file nobody else will
/// find, so it opens the path anew). On Windows an open file cannot be removed from under the
/// others that have it open, so the file stays (one per daemon, reused).
pub struct LockFile {
    file: std::fs::File,
    #[cfg(unix)]
    path: std::path::PathBuf,
}

impl LockFile {
    /// Takes the lock at `path` without waiting: Some when taken, None when another holds it.
    pub fn try_take(path: &Path) -> std::io::Result<Option<LockFile>> {
        loop {
            let file = private_options().create(true).truncate(false).write(true).open(path)?;
            if !try_lock(&file)? {
                return Ok(None);
            }
            if still_at(&file, path)? {
                #[cfg(unix)]
                return Ok(Some(LockFile { file, path: path.to_path_buf() }));
                #[cfg(windows)]
                return Ok(Some(LockFile { file }));
            }
        }
    }
}

/// Whether `file` is still the file at `path` (not removed by the lock's holder meanwhile).
#[cfg(unix)]
fn still_at(file: &std::fs::File, path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?;
    Ok(std::fs::metadata(path).is_ok_and(|now| now.dev() == held.dev() && now.ino() == held.ino()))
}

/// On Windows a lock file is never removed (see [`LockFile`]): the one opened is the one there.
#[cfg(windows)]
fn still_at(_file: &std::fs::File, _path: &Path) -> std::io::Result<bool> {
    Ok(true)
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Removed while still locked: whoever opens the path next makes a new file.
        #[cfg(unix)]
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// A file of this process's own on its stderr (a duplicate of fd 2, or of the stderr handle).
pub fn stderr_file() -> std::io::Result<std::fs::File> {
    #[cfg(unix)]
    let owned = std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned()?;
    #[cfg(windows)]
    let owned = std::os::windows::io::AsHandle::as_handle(&std::io::stderr()).try_clone_to_owned()?;
    Ok(std::fs::File::from(owned))
}

/// Waits until `file` (a non-blocking descriptor that said WouldBlock) has room to write.
/// Windows never makes a descriptor switchyard writes to non-blocking: it returns at once.
pub fn wait_writable(file: &std::fs::File) {
    #[cfg(unix)]
    {
        use rustix::event::{PollFd, PollFlags, poll};
        let mut fds = [PollFd::new(file, PollFlags::OUT)];
        let _ = poll(&mut fds, None);
    }
    #[cfg(windows)]
    let _ = file;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_file_is_private_and_its_lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_private(&path, b"token").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"token");
        assert!(!open_to_others(&std::fs::metadata(&path).unwrap()));
        let a = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let b = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(try_lock(&a).unwrap());
        assert!(!try_lock(&b).unwrap(), "a second open file description must not get the lock");
        drop(a);
        assert!(try_lock(&b).unwrap(), "closing the holder releases the lock");
    }

    /// Threads that each take the lock many times (each opening the path anew, as separate
    /// `connect`s do) never hold it two at once, though its file is removed and made again
    /// between them; on Unix no file is left once nobody holds it.
    #[test]
    fn a_lock_file_is_held_by_one_at_a_time_and_goes_with_its_holder() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("start.lock");
        let (holding, taken) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let mut mine = 0;
                    while mine < 50 {
                        let Some(lock) = LockFile::try_take(&path).unwrap() else { continue };
                        assert_eq!(holding.fetch_add(1, Ordering::SeqCst), 0, "two held the lock at once");
                        std::thread::yield_now();
                        holding.fetch_sub(1, Ordering::SeqCst);
                        drop(lock);
                        mine += 1;
                        taken.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(taken.load(Ordering::SeqCst), 200);
        let held = LockFile::try_take(&path).unwrap().expect("free");
        assert!(LockFile::try_take(&path).unwrap().is_none(), "taken twice");
        drop(held);
        assert_eq!(path.exists(), cfg!(windows), "the lock file outlived its holder");
    }

    #[test]
    fn verbatim_prefixes_go_where_the_path_needs_none() {
        use std::path::PathBuf;
        assert_eq!(plain(PathBuf::from(r"\\?\C:\Users\me\x.toml")), PathBuf::from(r"C:\Users\me\x.toml"));
        assert_eq!(plain(PathBuf::from(r"\\?\UNC\host\share\x")), PathBuf::from(r"\\host\share\x"));
        assert_eq!(plain(PathBuf::from("/home/me/x.toml")), PathBuf::from("/home/me/x.toml"));
        // A path too long for the plain form keeps its prefix.
        let long = format!(r"\\?\C:\{}", "d".repeat(300));
        assert_eq!(plain(PathBuf::from(&long)), PathBuf::from(&long));
    }

    #[test]
    fn a_private_dir_is_made_and_an_open_one_narrowed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        private_dir(&dir).unwrap();
        assert!(!open_to_others(&std::fs::metadata(&dir).unwrap()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            private_dir(&dir).unwrap();
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
        let file = tmp.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(private_dir(&file), Err(NotPrivate::NotADirectory)));
    }
}
