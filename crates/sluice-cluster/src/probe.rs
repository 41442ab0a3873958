//! Whether a node's process is gone, asked by connecting to its internal listener: a refused
//! connection means that nothing listens there (a SIGKILLed or crashed process on a host that
//! is up). A dead machine or a cut link answers nothing, which proves nothing; neither does an
//! accepted connection at first: a dying process closes its sockets one by one, so the
//! connection that told the controller it closed may go before the listener does, and the
//! kernel still completes handshakes on that listener for a moment. A probe therefore asks
//! again a few times over about a second before it concludes that the process lives.

use std::time::Duration;

/// How long one attempt waits for a connection: a refusal comes back at once from a host that
/// is up; anything slower is not evidence of a dead process.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);

/// The pauses before the second and later attempts (about 1.2 s in all).
const PAUSES: [Duration; 4] = [
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(300),
    Duration::from_millis(750),
];

/// Whether `addr` refuses connections within about a second.
pub async fn refuses_connections(addr: &str) -> bool {
    refuses_within(addr, &PAUSES).await
}

async fn refuses_within(addr: &str, pauses: &[Duration]) -> bool {
    let mut pauses = pauses.iter();
    loop {
        match tokio::time::timeout(ATTEMPT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return true,
            // Accepted (perhaps by a listener about to close), timed out or another error.
            _ => {}
        }
        match pauses.next() {
            Some(pause) => tokio::time::sleep(*pause).await,
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_refuses_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(refuses_within(&addr, &[]).await);
    }

    #[tokio::test]
    async fn a_listener_that_lives_is_not_taken_for_dead() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let pauses = [Duration::from_millis(10); 3];
        assert!(!refuses_within(&addr, &pauses).await);
        drop(listener);
    }

    /// The race seen in CI: the listener still accepted the first attempt, and closed just
    /// after it (a process half way through its exit).
    #[tokio::test]
    async fn a_listener_that_closes_after_the_first_attempt_is_found_gone() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let closing = tokio::spawn(async move {
            let accepted = listener.accept().await;
            drop(listener);
            accepted.is_ok()
        });
        let pauses = [Duration::from_millis(50); 4];
        assert!(refuses_within(&addr, &pauses).await);
        assert!(closing.await.unwrap(), "the first attempt was not accepted");
    }
}
