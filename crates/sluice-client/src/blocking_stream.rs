//! The byte stream under a [`crate::blocking::BlockingConnection`]: plain TCP, or TLS over it.
//! It comes in two halves because the benchmark's producer writes requests on one thread while
//! another reads the responses. With TLS both halves share the rustls session behind a mutex,
//! and neither holds the lock while it waits on the socket: a writer blocked on a full socket
//! while the reader waits for the lock would stop both directions.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_wire::rustls;

use crate::error::ClientError;

type Session = Arc<Mutex<rustls::ClientConnection>>;

/// Bytes read from the socket per `read` while waiting for TLS records.
const RAW_READ_BYTES: usize = 64 * 1024;

/// Connects `tcp` as this process is configured to: over TLS (handshake done here) or plain.
pub(crate) fn open(tcp: TcpStream, addr: &str) -> Result<(WriteHalf, ReadHalf), ClientError> {
    let io = |source| ClientError::Io {
        addr: addr.to_string(),
        source,
    };
    let reader_tcp = tcp.try_clone().map_err(io)?;
    let Some(config) = crate::security::tls_config() else {
        return Ok((
            WriteHalf { tcp, session: None },
            ReadHalf::new(reader_tcp, None),
        ));
    };
    let mut session = rustls::ClientConnection::new(config, crate::security::server_name(addr)?)
        .map_err(|e| ClientError::Security(format!("TLS with {addr}: {e}")))?;
    let mut handshake_tcp = tcp.try_clone().map_err(io)?;
    while session.is_handshaking() {
        session
            .complete_io(&mut handshake_tcp)
            .map_err(|e| ClientError::Security(format!("TLS with {addr}: {e}")))?;
    }
    let session = Arc::new(Mutex::new(session));
    Ok((
        WriteHalf {
            tcp,
            session: Some(session.clone()),
        },
        ReadHalf::new(reader_tcp, Some(session)),
    ))
}

fn lock(session: &Session) -> io::Result<MutexGuard<'_, rustls::ClientConnection>> {
    session
        .lock()
        .map_err(|_| io::Error::other("the TLS session's lock was poisoned"))
}

/// Writes whole requests.
pub(crate) struct WriteHalf {
    tcp: TcpStream,
    session: Option<Session>,
}

impl WriteHalf {
    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some(session) = &self.session else {
            return self.tcp.write_all(bytes);
        };
        // Each TLS record of up to 16 KiB adds at most ~29 bytes (header, tag, type).
        let mut records = Vec::with_capacity(bytes.len() + (bytes.len() / 16_384 + 1) * 32);
        {
            let mut s = lock(session)?;
            let mut written = 0;
            while written < bytes.len() {
                let n = s.writer().write(&bytes[written..])?;
                while s.wants_write() {
                    s.write_tls(&mut records)?;
                }
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the TLS session took no more bytes",
                    ));
                }
                written += n;
            }
        }
        self.tcp.write_all(&records)
    }
}

impl Drop for WriteHalf {
    /// Says goodbye as TLS expects (`close_notify`), so the broker sees a clean end rather
    /// than a cut connection; best effort.
    fn drop(&mut self) {
        let Some(session) = &self.session else {
            return;
        };
        let mut records = Vec::new();
        if let Ok(mut s) = lock(session) {
            s.send_close_notify();
            while s.wants_write() {
                if s.write_tls(&mut records).is_err() {
                    break;
                }
            }
        }
        let _ = self.tcp.write_all(&records);
    }
}

/// Reads responses (implements [`Read`], so frames are read as from a socket).
pub struct ReadHalf {
    tcp: TcpStream,
    session: Option<Session>,
    /// TLS records read from the socket and not yet handed to the session.
    raw: Vec<u8>,
    raw_start: usize,
    raw_end: usize,
}

impl std::fmt::Debug for ReadHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReadHalf(tls: {})", self.session.is_some())
    }
}

impl ReadHalf {
    fn new(tcp: TcpStream, session: Option<Session>) -> ReadHalf {
        let raw = if session.is_some() {
            vec![0; RAW_READ_BYTES]
        } else {
            Vec::new()
        };
        ReadHalf {
            tcp,
            session,
            raw,
            raw_start: 0,
            raw_end: 0,
        }
    }
}

impl Read for ReadHalf {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let Some(session) = &self.session else {
            return self.tcp.read(out);
        };
        loop {
            let mut taken_any = false;
            {
                let mut s = lock(session)?;
                // Hand over what was read, as far as the session takes it (it stops taking
                // records while its decrypted bytes wait to be read).
                while self.raw_start < self.raw_end && s.wants_read() {
                    let mut pending = &self.raw[self.raw_start..self.raw_end];
                    let taken = s.read_tls(&mut pending)?;
                    self.raw_start += taken;
                    taken_any |= taken > 0;
                    s.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    if taken == 0 {
                        break;
                    }
                }
                match s.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if self.raw_start < self.raw_end {
                if taken_any {
                    continue;
                }
                return Err(io::Error::other(
                    "the TLS session takes no more records and has nothing to read",
                ));
            }
            let n = self.tcp.read(&mut self.raw)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the broker closed the TLS connection",
                ));
            }
            self.raw_start = 0;
            self.raw_end = n;
        }
    }
}
