//! The endpoint on Windows: a named pipe admitting this user alone.

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::windows::io::AsRawHandle;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::windows::named_pipe::{ClientOptions, NamedPipeClient, NamedPipeServer, PipeMode, ServerOptions};
use windows_sys::Win32::Foundation::{ERROR_PIPE_BUSY, HANDLE};
use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
use windows_sys::Win32::System::Pipes::GetNamedPipeServerProcessId;
use windows_sys::Win32::System::Threading::{OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION};

use crate::win::{Descriptor, last_error, owned, sid_of_process, user_sid};

/// A connection to the daemon.
pub type Stream = NamedPipeClient;
/// The two halves of a [`Stream`], each owned by a task of its own.
pub type ReadHalf = tokio::io::ReadHalf<Stream>;
pub type WriteHalf = tokio::io::WriteHalf<Stream>;

/// Splits a connection into halves a task each can own.
pub fn split(stream: Stream) -> (ReadHalf, WriteHalf) {
    tokio::io::split(stream)
}

/// The pipe of the daemon whose config key is `key`, for this user.
pub fn pipe_path(key: &str) -> PathBuf {
    let sid = user_sid().unwrap_or_else(|_| std::env::var("USERNAME").unwrap_or_default());
    PathBuf::from(format!(r"\\.\pipe\switchyard-{sid}-{key}"))
}

/// A path given by hand (`--socket`, `run --listen`) must name a pipe.
fn check_pipe_path(path: &Path) -> std::io::Result<()> {
    let text = path.to_string_lossy();
    if text.len() > 9 && text.get(..9).is_some_and(|p| p.eq_ignore_ascii_case(r"\\.\pipe\")) {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is not a named pipe; on Windows the daemon's endpoint is one: give \\\\.\\pipe\\NAME",
            path.display()
        ),
    ))
}

/// How long a connect waits for a free instance of a busy pipe.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// Connects to the daemon's pipe, once it is checked to be served by this user. NotFound:
/// nobody listens.
pub async fn connect(path: &Path) -> std::io::Result<Stream> {
    check_pipe_path(path)?;
    let deadline = tokio::time::Instant::now() + BUSY_WAIT;
    let client = loop {
        match ClientOptions::new().pipe_mode(PipeMode::Byte).open(path) {
            Ok(c) => break c,
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY as i32) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(e),
        }
    };
    check_server(client.as_raw_handle() as HANDLE, path)?;
    Ok(client)
}

/// Refuses a pipe served by a process of another user (one who made the name first).
#[allow(unsafe_code)]
fn check_server(pipe: HANDLE, path: &Path) -> std::io::Result<()> {
    let mut pid = 0u32;
    // SAFETY: `pipe` is a valid pipe handle; `pid` receives the server's process id.
    if unsafe { GetNamedPipeServerProcessId(pipe, &mut pid) } == 0 {
        return Err(last_error(&format!("cannot tell who serves {}", path.display())));
    }
    // SAFETY: a query-only handle of our own, closed when dropped.
    let process = owned(unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) }, "open the pipe's server")?;
    if sid_of_process(process.as_raw_handle() as HANDLE)? != user_sid()? {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is served by process {pid} of another user; switchyard does not talk to it", path.display()),
        ));
    }
    Ok(())
}

/// Sends one line and reads one line back, blocking at most `wait` for the answer.
pub fn request(path: &Path, line: &[u8], wait: Duration) -> std::io::Result<String> {
    check_pipe_path(path)?;
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    check_server(file.as_raw_handle() as HANDLE, path)?;
    file.write_all(line)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut answer = String::new();
        let _ = tx.send(std::io::BufReader::new(file).read_line(&mut answer).map(|_| answer));
    });
    rx.recv_timeout(wait).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer on {} within {wait:?}", path.display()))
    })?
}

/// The server side of the daemon's pipe: one instance waits for the next client at all times.
pub struct Listener {
    name: OsString,
    next: NamedPipeServer,
    descriptor: Descriptor,
}

impl Listener {
    /// Creates the pipe's first instance. Fails when the name exists (another daemon, or
    /// someone else's pipe): the error says so.
    pub fn bind(path: &Path) -> std::io::Result<Listener> {
        check_pipe_path(path)?;
        let descriptor = Descriptor::user_only()?;
        let next = create(path.as_os_str(), &descriptor, true).map_err(|e| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                std::io::Error::new(
                    e.kind(),
                    format!("the pipe {} exists already (another daemon?): {e}", path.display()),
                )
            } else {
                e
            }
        })?;
        Ok(Listener { name: path.as_os_str().to_os_string(), next, descriptor })
    }

    /// Waits for a client; returns its connection, with a new instance waiting for the next.
    pub async fn accept(&mut self) -> std::io::Result<NamedPipeServer> {
        self.next.connect().await?;
        let fresh = create(&self.name, &self.descriptor, false)?;
        Ok(std::mem::replace(&mut self.next, fresh))
    }
}

#[allow(unsafe_code)]
fn create(name: &std::ffi::OsStr, descriptor: &Descriptor, first: bool) -> std::io::Result<NamedPipeServer> {
    let mut attributes = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: descriptor.as_ptr(),
        bInheritHandle: 0,
    };
    // SAFETY: `attributes` points at a valid descriptor that outlives the call.
    unsafe {
        ServerOptions::new()
            .first_pipe_instance(first)
            .reject_remote_clients(true)
            .pipe_mode(PipeMode::Byte)
            .create_with_security_attributes_raw(name, (&mut attributes as *mut SECURITY_ATTRIBUTES).cast())
    }
}
