//! One control-plane process: started in a process group of its own with its output in a log file,
//! waited for until a probe says it is ready, and stopped by signalling the whole group.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::Error;

/// How much of a log an error message quotes.
const LOG_TAIL_BYTES: u64 = 6_000;
/// How often a starting component is probed.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The program, arguments and log of a component, kept so it can be started again.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) component: &'static str,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) log: PathBuf,
}

#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) launch: Launch,
    child: Child,
}

impl Launch {
    /// Starts the process with its output appended to the log (a restart keeps the earlier run's).
    pub(crate) fn spawn(&self) -> Result<Running, Error> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|source| Error::Io {
                action: format!("open the {} log {}", self.component, self.log.display()),
                source,
            })?;
        let log_for_stderr = log.try_clone().map_err(|source| Error::Io {
            action: format!("share the {} log {}", self.component, self.log.display()),
            source,
        })?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr)
            // A group of its own: stopping it reaches anything it started, and a Ctrl-C meant for
            // the test runner's group does not race the teardown.
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Io {
                action: format!("start {} ({})", self.component, self.program.display()),
                source,
            })?;
        Ok(Running {
            launch: self.clone(),
            child,
        })
    }
}

impl Running {
    /// Probes until `probe` answers `Ok`, failing when the process exits or the time is up. The
    /// error carries the end of the component's log.
    pub(crate) fn wait_ready(
        &mut self,
        timeout: Duration,
        mut probe: impl FnMut() -> Result<(), String>,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited()? {
                return Err(Error::ComponentExited {
                    component: self.launch.component,
                    status: status.to_string(),
                    log: self.launch.log.clone(),
                    log_tail: log_tail(&self.launch.log),
                });
            }
            let last_problem = match probe() {
                Ok(()) => return Ok(()),
                Err(problem) => problem,
            };
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    component: self.launch.component,
                    timeout,
                    last_problem,
                    log: self.launch.log.clone(),
                    log_tail: log_tail(&self.launch.log),
                });
            }
            thread::sleep(PROBE_INTERVAL);
        }
    }

    fn exited(&mut self) -> Result<Option<ExitStatus>, Error> {
        self.child.try_wait().map_err(|source| Error::Io {
            action: format!("check whether {} is running", self.launch.component),
            source,
        })
    }

    /// Asks the process group to stop (SIGTERM), then kills it if it has not exited within `grace`.
    pub(crate) fn terminate(mut self, grace: Duration) {
        self.signal_group(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    /// Kills the whole process group at once and reaps the process.
    pub(crate) fn kill(mut self) {
        self.signal_group(libc::SIGKILL);
        // Reaping can only fail if the child was already reaped, which is the goal anyway.
        let _ = self.child.wait();
    }

    fn signal_group(&self, signal: libc::c_int) {
        let Ok(group) = libc::pid_t::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours. The group id is the
        // child's pid (it was started with process_group(0)), and the child is not reaped before this
        // call, so the id cannot have been reused by an unrelated group.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

/// The last few kilobytes of a log, for error messages; empty when the log cannot be read.
pub(crate) fn log_tail(path: &Path) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let start = length.saturating_sub(LOG_TAIL_BYTES);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    // Start at a line boundary unless the whole log fits.
    match (start > 0, text.find('\n')) {
        (true, Some(newline)) => text[newline + 1..].to_owned(),
        _ => text.into_owned(),
    }
}
