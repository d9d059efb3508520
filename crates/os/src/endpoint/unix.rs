//! The endpoint on Linux and macOS: a Unix stream socket.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

/// A connection to the daemon.
pub type Stream = tokio::net::UnixStream;
/// The two halves of a [`Stream`], each owned by a task of its own.
pub type ReadHalf = tokio::net::unix::OwnedReadHalf;
pub type WriteHalf = tokio::net::unix::OwnedWriteHalf;

/// Splits a connection into halves a task each can own.
pub fn split(stream: Stream) -> (ReadHalf, WriteHalf) {
    stream.into_split()
}

/// Connects to the daemon's endpoint. NotFound or ConnectionRefused: nobody listens.
pub async fn connect(path: &Path) -> std::io::Result<Stream> {
    Stream::connect(path).await
}

/// Sends one line and reads one line back, blocking at most `wait` for the answer (`status`,
/// `stop`).
pub fn request(path: &Path, line: &[u8], wait: Duration) -> std::io::Result<String> {
    let mut stream = std::os::unix::net::UnixStream::connect(path)?;
    stream.set_read_timeout(Some(wait))?;
    stream.write_all(line)?;
    let mut answer = String::new();
    std::io::BufReader::new(&stream).read_line(&mut answer)?;
    Ok(answer)
}
