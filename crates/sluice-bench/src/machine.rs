//! The machine a benchmark ran on, and its physical floor measured in the same run: a loopback
//! TCP round trip (no broker can answer faster) and an append + fdatasync (no durable ack can
//! be cheaper).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::clock::RunClock;
use crate::error::BenchError;
use crate::latency::{Latencies, LatencySummary};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_bytes: u64,
    pub kernel: String,
    pub cpu: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Floor {
    /// 128-byte ping-pong over loopback TCP.
    pub loopback_rtt: LatencySummary,
    /// Append 1 KiB to a file and fdatasync it.
    pub append_fdatasync: LatencySummary,
}

pub fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let meminfo = read("/proc/meminfo");
    let memory_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Machine {
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_bytes: memory_kb * 1024,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        cpu: read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default(),
    }
}

/// Measures the floor: `rounds` loopback round trips and `syncs` appends with fdatasync in
/// `dir` (put it on the disk the broker uses).
pub fn floor(dir: &Path, rounds: usize, syncs: usize) -> Result<Floor, BenchError> {
    let _ = crate::timing::precise_timers_for_this_thread();
    let clock = RunClock::start();
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| BenchError::io("binding a loopback socket", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::io("loopback address", e))?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; 128];
        loop {
            if s.read_exact(&mut buf).is_err() {
                return Ok(());
            }
            s.write_all(&buf)?;
        }
    });
    let mut rtt = Latencies::default();
    {
        let mut s =
            TcpStream::connect(addr).map_err(|e| BenchError::io("connecting over loopback", e))?;
        s.set_nodelay(true)
            .map_err(|e| BenchError::io("TCP_NODELAY", e))?;
        let mut buf = [7u8; 128];
        for i in 0..rounds + rounds / 10 {
            let t = clock.now_ns();
            s.write_all(&buf)
                .and_then(|_| s.read_exact(&mut buf))
                .map_err(|e| BenchError::io("loopback ping-pong", e))?;
            if i >= rounds / 10 {
                rtt.record_ns(clock.now_ns() - t);
            }
        }
    }
    let _ = echo.join();
    std::fs::create_dir_all(dir)
        .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(format!("floor-{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| BenchError::io(format!("creating {}", path.display()), e))?;
    let block = [1u8; 1024];
    let mut sync = Latencies::default();
    for i in 0..syncs {
        let t = clock.now_ns();
        file.write_all_at(&block, (i * block.len()) as u64)
            .and_then(|_| file.sync_data())
            .map_err(|e| BenchError::io("append + fdatasync", e))?;
        sync.record_ns(clock.now_ns() - t);
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(Floor {
        loopback_rtt: rtt.summary(),
        append_fdatasync: sync.summary(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        let f = floor(dir.path(), 200, 20).unwrap();
        assert_eq!(f.loopback_rtt.count, 200);
        assert_eq!(f.append_fdatasync.count, 20);
        assert!(f.loopback_rtt.p50_us > 0.0 && f.append_fdatasync.p50_us > 0.0);
        let m = machine();
        assert!(m.cores >= 1 && m.memory_bytes > 0);
    }
}
