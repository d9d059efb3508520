//! Process trees on Windows: a Job Object per server, killed when its last handle closes.

use std::os::windows::io::{AsRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, STILL_ACTIVE};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, PROCESSENTRY32W, Process32FirstW, Process32NextW, TH32CS_SNAPPROCESS, TH32CS_SNAPTHREAD,
    THREADENTRY32, Thread32First, Thread32Next,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation, SetInformationJobObject,
    TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NO_WINDOW, CREATE_SUSPENDED, GetExitCodeProcess, OpenProcess, OpenThread, PROCESS_QUERY_LIMITED_INFORMATION,
    ResumeThread, THREAD_SUSPEND_RESUME,
};

use super::Stop;
use crate::win::{last_error, owned};

/// A started server's process tree: the Job Object it and everything it starts belong to.
/// Only the router holds the job's handle, and the job is `KILL_ON_JOB_CLOSE`: when the router
/// exits, however it exits, the OS ends the whole tree. Dropping the tree ends it too.
#[derive(Debug)]
pub struct Tree {
    job: OwnedHandle,
}

impl Tree {
    /// Ends every process of the tree (Windows has no polite stop for a windowless process).
    #[allow(unsafe_code)]
    pub fn stop(&self, _stop: Stop) {
        // SAFETY: the job handle is valid while `self` lives.
        unsafe { TerminateJobObject(self.job.as_raw_handle(), 1) };
    }
}

/// Makes `cmd` start suspended and without a console window: [`adopt`] puts it in its job
/// before it runs a single instruction, so nothing it starts escapes the job.
pub fn prepare(cmd: &mut tokio::process::Command) {
    cmd.creation_flags(CREATE_SUSPENDED | CREATE_NO_WINDOW);
}

/// Puts a child started from a command [`prepare`]d in a new job, then lets it run. A child
/// that cannot be put in a job is ended, and the error says why.
#[allow(unsafe_code)]
pub fn adopt(child: &tokio::process::Child) -> std::io::Result<Tree> {
    let (Some(pid), Some(process)) = (child.id(), child.raw_handle()) else {
        return Err(std::io::Error::other("the server exited before it could be put in a job"));
    };
    // SAFETY: no name and default security: a fresh, unnamed job we own.
    let job = owned(unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) }, "cannot create a job object")?;
    let mut limits = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: the pointer and size describe `limits`, which outlives the call.
    let set = unsafe {
        SetInformationJobObject(
            job.as_raw_handle(),
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    };
    // SAFETY: both handles are valid: the job above, the child's process handle while `child` lives.
    if set == 0 || unsafe { AssignProcessToJobObject(job.as_raw_handle(), process as HANDLE) } == 0 {
        let e = last_error("cannot put the server in a job object");
        // SAFETY: the process handle is valid; the child is suspended and has run nothing.
        unsafe { windows_sys::Win32::System::Threading::TerminateProcess(process as HANDLE, 1) };
        return Err(e);
    }
    resume(pid)?;
    Ok(Tree { job })
}

/// Resumes every thread of process `pid` (a process created suspended has one).
#[allow(unsafe_code)]
fn resume(pid: u32) -> std::io::Result<()> {
    // SAFETY: a snapshot of all threads, owned below.
    let snapshot = owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) }, "cannot list threads")?;
    let mut entry = THREADENTRY32 { dwSize: std::mem::size_of::<THREADENTRY32>() as u32, ..Default::default() };
    let mut resumed = 0;
    // SAFETY: `entry` is a valid THREADENTRY32 with its size set; the snapshot handle is valid.
    let mut more = unsafe { Thread32First(snapshot.as_raw_handle(), &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: a handle of our own to the thread, closed right after use.
            let thread = unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) };
            if !thread.is_null() {
                // SAFETY: `thread` is the valid handle just opened.
                unsafe {
                    ResumeThread(thread);
                    CloseHandle(thread);
                }
                resumed += 1;
            }
        }
        // SAFETY: as for Thread32First.
        more = unsafe { Thread32Next(snapshot.as_raw_handle(), &mut entry) } != 0;
    }
    if resumed == 0 {
        return Err(std::io::Error::other("the server's process has no thread to resume"));
    }
    Ok(())
}

/// Nothing to do on Windows: the job ends the tree when the router's handle to it closes.
pub fn die_with_parent(_cmd: &mut tokio::process::Command) {}

/// Whether process `pid` is running.
#[allow(unsafe_code)]
pub fn running(pid: u32) -> bool {
    // SAFETY: a query-only handle of our own, closed when `handle` drops.
    let Ok(handle) = owned(unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) }, "open") else {
        return false;
    };
    let mut code = 0u32;
    // SAFETY: the handle is valid; `code` receives the exit code.
    let ok = unsafe { GetExitCodeProcess(handle.as_raw_handle(), &mut code) };
    ok != 0 && code == STILL_ACTIVE as u32
}

/// The first child of process `pid`, when it has one.
#[allow(unsafe_code)]
pub fn first_child(pid: u32) -> Option<u32> {
    // SAFETY: a snapshot of all processes, owned below.
    let snapshot = owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0) }, "snapshot").ok()?;
    let mut entry = PROCESSENTRY32W { dwSize: std::mem::size_of::<PROCESSENTRY32W>() as u32, ..Default::default() };
    // SAFETY: `entry` is valid with its size set; the snapshot handle is valid.
    let mut more = unsafe { Process32FirstW(snapshot.as_raw_handle(), &mut entry) } != 0;
    while more {
        if entry.th32ParentProcessID == pid && entry.th32ProcessID != pid {
            return Some(entry.th32ProcessID);
        }
        // SAFETY: as for Process32FirstW.
        more = unsafe { Process32NextW(snapshot.as_raw_handle(), &mut entry) } != 0;
    }
    None
}

/// Windows has no soft limit on open handles a process must raise.
pub fn open_files_limit() -> Option<u64> {
    None
}

/// Nothing to raise on Windows.
pub fn raise_open_files(_wanted: u64) -> std::io::Result<()> {
    Ok(())
}

/// Starts the daemon with no console and in a process group of its own, out of the job of the
/// client that started it where that job allows (a client that ends its job must not end the
/// daemon); [`spawn_detached`] retries without when it does not.
pub fn detach(cmd: &mut std::process::Command) {
    use std::os::windows::process::CommandExt;
    use windows_sys::Win32::System::Threading::{
        CREATE_BREAKAWAY_FROM_JOB, CREATE_NEW_PROCESS_GROUP, DETACHED_PROCESS,
    };
    cmd.creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW | CREATE_BREAKAWAY_FROM_JOB);
}

/// Spawns a command [`detach`]ed: without leaving the job when the job forbids it.
pub fn spawn_detached(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    use std::os::windows::process::CommandExt;
    use windows_sys::Win32::System::Threading::{CREATE_NEW_PROCESS_GROUP, DETACHED_PROCESS};
    match cmd.spawn() {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            cmd.creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
            cmd.spawn()
        }
        other => other,
    }
}

/// Windows has no sessions to leave: [`detach`] did it at spawn.
pub fn leave_session() {}

/// Nothing to do: the daemon's stdout is a pipe whose reader is gone once it said it is ready,
/// and nothing writes to it after that.
pub fn stdout_to_null() {}

/// Nothing more to mark: [`keep_std_handles_from_children`] made the handles this process was
/// given non-inheritable at start, and switchyard opens none inheritable itself.
pub fn close_inherited_on_exec() {}

/// Windows names a process by its file; nothing to set.
pub fn name_main_thread() {}

/// Makes this process's own stdin, stdout and stderr non-inheritable. A Windows child inherits
/// every inheritable handle of its parent, not only the three it is given: a daemon started by
/// `connect` would otherwise hold the client's pipes open after `connect` exits, and the client
/// would wait for an end of output that never comes. A child given `Stdio::inherit()` still gets
/// them (the standard library passes an inheritable duplicate). Called first thing in `main`.
#[allow(unsafe_code)]
pub fn keep_std_handles_from_children() {
    use windows_sys::Win32::Foundation::{HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, SetHandleInformation};
    use windows_sys::Win32::System::Console::{GetStdHandle, STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE};
    for which in [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE] {
        // SAFETY: GetStdHandle takes no pointers; the handle it returns (if any) is this
        // process's, and SetHandleInformation changes only its inherit flag.
        unsafe {
            let handle = GetStdHandle(which);
            if !handle.is_null() && handle != INVALID_HANDLE_VALUE {
                SetHandleInformation(handle, HANDLE_FLAG_INHERIT, 0);
            }
        }
    }
}
