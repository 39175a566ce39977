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

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the component without stopping it: it keeps its
    /// connections and its state and does nothing meanwhile, as a process starved of CPU or
    /// stuck on a lock.
    pub(crate) fn set_paused(&self, paused: bool) {
        self.signal_group(if paused { libc::SIGSTOP } else { libc::SIGCONT });
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn shell(dir: &Path, script: &str) -> Launch {
        Launch {
            component: "test-shell",
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".to_owned(), script.to_owned()],
            log: dir.join("test-shell.log"),
        }
    }

    #[test]
    fn a_component_that_exits_during_start_up_is_reported_with_its_log() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut running = shell(dir.path(), "echo 'listen tcp: bind failed' >&2; exit 3")
            .spawn()
            .expect("spawn");
        let error = running
            .wait_ready(Duration::from_secs(30), || Err("not yet".to_owned()))
            .expect_err("the process exited");
        let message = error.to_string();
        assert!(message.contains("test-shell exited"), "{message}");
        assert!(message.contains("bind failed"), "{message}");
        running.kill();
    }

    #[test]
    fn a_component_that_never_answers_times_out_with_the_last_probe_problem() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut running = shell(dir.path(), "echo starting; exec sleep 30")
            .spawn()
            .expect("spawn");
        let error = running
            .wait_ready(Duration::from_millis(300), || {
                Err("connection refused".to_owned())
            })
            .expect_err("never ready");
        let message = error.to_string();
        assert!(message.contains("not ready"), "{message}");
        assert!(message.contains("connection refused"), "{message}");
        assert!(message.contains("starting"), "{message}");
        running.kill();
    }

    #[test]
    fn killing_a_component_also_kills_what_it_started() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("grandchild.pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
        let running = shell(dir.path(), &script).spawn().expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild = loop {
            if let Some(pid) = fs::read_to_string(&pid_file)
                .ok()
                .and_then(|text| text.trim().parse::<u32>().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the shell never started sleep");
            thread::sleep(Duration::from_millis(20));
        };
        running.kill();
        // The orphaned sleep is reaped by init; until then it may linger as a zombie.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let state = fs::read_to_string(format!("/proc/{grandchild}/stat")).ok();
            let alive = state.is_some_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().next())
                    != Some("Z")
            });
            if !alive {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the component's child {grandchild} survived the kill"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn log_tail_starts_at_a_line_boundary_and_keeps_the_end() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("long.log");
        let text: String = (0..2_000).map(|line| format!("line {line}\n")).collect();
        fs::write(&log, text).expect("write log");
        let tail = log_tail(&log);
        assert!(tail.starts_with("line "), "{:?}", &tail[..20]);
        assert!(tail.ends_with("line 1999\n"));
        assert!(tail.len() as u64 <= LOG_TAIL_BYTES);
    }
}
