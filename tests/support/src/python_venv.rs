//! The Python virtualenvs for tests that run Python MCP clients and servers: the SDK's (`mcp`
//! pinned in tests/python/requirements.txt) and FastMCP's with its tasks extension
//! (tests/python/requirements-tasks.txt, kept apart so the SDK tests do not install it), and the
//! OpenTelemetry packages of the OTLP receiver (tests/python/requirements-otel.txt). Each is
//! made once under cargo's target temp dir, shared by concurrent test binaries, rebuilt when its
//! requirements file changes. [`make_venv`] makes one of any other requirements file (the
//! plugin toolchains' componentize-py, tests/plugin-langs) the same way.
//!
//! One copy of each for every test binary; the setup lock ([`crate::setup_lock`]) keeps
//! concurrent binaries from building one twice, or rebuilding one another uses.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// tests/python, where the SDK scripts live.
pub fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("two levels below the repository")
        .join("tests")
        .join("python")
}

/// Each virtualenv's python, once made (or why it cannot be).
static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static TASKS_VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static OTEL_VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The virtualenv's python, with the pinned SDK installed; fails the test saying what is missing
/// (python3 >= 3.10 with venv and pip, or PyPI) when it cannot be made.
pub fn venv_python() -> PathBuf {
    match VENV.get_or_init(|| make_venv(&python_dir().join("requirements.txt"), "python-venv")) {
        Ok(python) => python.clone(),
        Err(e) => panic!("the Python SDK tests cannot run: {e}"),
    }
}

/// The python of a virtualenv with FastMCP and its tasks extension (`io.modelcontextprotocol/tasks`)
/// installed, pinned in tests/python/requirements-tasks.txt; fails like [`venv_python`].
pub fn tasks_venv_python() -> PathBuf {
    let made = TASKS_VENV.get_or_init(|| make_venv(&python_dir().join("requirements-tasks.txt"), "python-tasks-venv"));
    match made {
        Ok(python) => python.clone(),
        Err(e) => panic!("the FastMCP tasks tests cannot run: {e}"),
    }
}

/// The python of a virtualenv with the OpenTelemetry protocol and semantic-conventions packages
/// (tests/python/requirements-otel.txt), for the OTLP receiver; fails like [`venv_python`].
pub fn otel_venv_python() -> PathBuf {
    let made = OTEL_VENV.get_or_init(|| make_venv(&python_dir().join("requirements-otel.txt"), "python-otel-venv"));
    match made {
        Ok(python) => python.clone(),
        Err(e) => panic!("the telemetry tests cannot run: {e}"),
    }
}

/// Makes (or reuses) the virtualenv `dir` under the target temp dir with the `requirements`
/// file installed, under the setup lock, and returns its python; remade when the file changes.
pub fn make_venv(requirements: &Path, dir: &str) -> Result<PathBuf, String> {
    let version = Command::new("python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .map_err(|e| format!("`python3` not found on PATH ({e}); install Python >= 3.10 with venv and pip"))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let (major, minor) = version.split_once('.').unwrap_or(("0", "0"));
    if (major.parse::<u32>().unwrap_or(0), minor.parse::<u32>().unwrap_or(0)) < (3, 10) {
        return Err(format!("python3 is `{version}`; the pinned packages need Python >= 3.10"));
    }
    let wanted = fs::read_to_string(requirements).map_err(|e| format!("read {}: {e}", requirements.display()))?;
    let venv = crate::target_tmp().join(dir);
    let python = venv.join("bin").join("python");
    let stamp = venv.join("switchyard-requirements.txt");
    let ready = || python.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == wanted);
    crate::setup_lock::setup_lock().ensure(ready, || {
        let started = Instant::now();
        let _ = fs::remove_dir_all(&venv);
        crate::run_step(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            &format!("`python3 -m venv {}`", venv.display()),
            " Python's venv module (with ensurepip) is missing: on Debian or Ubuntu install `python3-venv` (e.g. apt-get install python3.11-venv), then re-run.",
        )?;
        crate::run_step(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(requirements),
            &format!("`pip install -r {}` into {}", requirements.display(), venv.display()),
            " It needs PyPI (or a mirror set with PIP_INDEX_URL).",
        )?;
        fs::write(&stamp, &wanted).map_err(|e| format!("write {}: {e}", stamp.display()))?;
        eprintln!("python virtualenv {dir} made in {:?}", started.elapsed());
        Ok(())
    })?;
    Ok(python)
}
