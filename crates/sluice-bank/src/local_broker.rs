//! A Sluice broker the bench runs itself (`--local-broker DIR`), so that `--faults` can
//! SIGKILL it and start it again on the same data and port.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::error::BankError;

#[derive(Debug)]
pub struct LocalBroker {
    exe: PathBuf,
    dir: PathBuf,
    pub bootstrap: String,
    admin: String,
    child: Option<Child>,
    pub restarts: u32,
}

/// Two distinct free ports (both held while chosen, so they differ).
fn free_ports() -> Result<(u16, u16), BankError> {
    let bind = || {
        TcpListener::bind("127.0.0.1:0").map_err(|e| BankError::Setup(format!("no free port: {e}")))
    };
    let (a, b) = (bind()?, bind()?);
    let port = |l: &TcpListener| {
        l.local_addr()
            .map(|a| a.port())
            .map_err(|e| BankError::Setup(format!("no free port: {e}")))
    };
    Ok((port(&a)?, port(&b)?))
}

/// A child process's log file, appended to across its restarts.
pub fn append_log(path: &Path) -> Result<std::fs::File, BankError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| BankError::Setup(format!("cannot open {}: {e}", path.display())))
}

/// The `sluice` executable beside this one.
pub fn sluice_exe() -> Result<PathBuf, BankError> {
    let me = std::env::current_exe()
        .map_err(|e| BankError::Setup(format!("cannot find this executable: {e}")))?;
    let exe = me.with_file_name("sluice");
    if exe.is_file() {
        Ok(exe)
    } else {
        Err(BankError::Setup(format!(
            "no sluice executable at {} (build it: cargo build --release -p sluice)",
            exe.display()
        )))
    }
}

impl LocalBroker {
    pub fn start(dir: &Path) -> Result<LocalBroker, BankError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| BankError::Setup(format!("cannot create {}: {e}", dir.display())))?;
        let (kafka, admin) = free_ports()?;
        let mut b = LocalBroker {
            exe: sluice_exe()?,
            dir: dir.to_path_buf(),
            bootstrap: format!("127.0.0.1:{kafka}"),
            admin: format!("127.0.0.1:{admin}"),
            child: None,
            restarts: 0,
        };
        b.spawn()?;
        Ok(b)
    }

    fn spawn(&mut self) -> Result<(), BankError> {
        let log = append_log(&self.dir.join("broker.log"))?;
        let child = Command::new(&self.exe)
            .args([
                "serve",
                "--listen",
                &self.bootstrap,
                "--admin-listen",
                &self.admin,
            ])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| BankError::Setup(format!("starting {}: {e}", self.exe.display())))?;
        self.child = Some(child);
        let deadline = crate::clock::now() + Duration::from_secs(60);
        loop {
            let health = std::net::TcpStream::connect(&self.admin)
                .ok()
                .and_then(|mut s| {
                    use std::io::{Read, Write};
                    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
                    s.write_all(b"GET /health HTTP/1.0\r\n\r\n").ok()?;
                    let mut out = String::new();
                    s.read_to_string(&mut out).ok()?;
                    (out.split_whitespace().nth(1) == Some("200")).then_some(())
                });
            if health.is_some() {
                return Ok(());
            }
            if crate::clock::now() > deadline {
                return Err(BankError::Setup(format!(
                    "the broker did not become healthy; see {}",
                    self.dir.join("broker.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, then start again on the same data after `pause`.
    pub fn crash_and_restart(&mut self, pause: Duration) -> Result<(), BankError> {
        self.kill();
        std::thread::sleep(pause);
        self.restarts += 1;
        self.spawn()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LocalBroker {
    fn drop(&mut self) {
        self.kill();
    }
}
