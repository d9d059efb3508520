//! A fault-injecting TCP proxy for end-to-end tests: carries bytes between clients and one upstream
//! on 127.0.0.1, and on command resets every connection, black-holes all traffic, or refuses new
//! connections, the failures a remote MCP server's link can suffer.
//!
//! The proxy runs on a thread of its own with its own tokio runtime, so it keeps carrying while
//! the test's thread blocks (a sync test waiting for a client process, or an async test on a
//! current-thread runtime), and every control call is a plain synchronous call that has taken
//! effect when it returns.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

/// How long a control call waits for the proxy's thread before failing the test.
const CONTROL_LIMIT: Duration = Duration::from_secs(10);

/// A TCP proxy in front of `upstream` on its own port of 127.0.0.1.
///
/// - `sever()`: every live connection is reset at once (`SO_LINGER` 0, so both the client and the
///   upstream see RST, not FIN); new connections are accepted and carried as before.
/// - `black_hole(true)`: every connection, old and new, carries nothing in either direction. New
///   connections are still accepted (the kernel completes the handshake) but not yet connected
///   upstream. The proxy stops reading, so a sender's bytes pile up in the kernel buffers (its
///   writes succeed until they fill, as over a real partition); the at most one chunk per direction
///   already read is held, and so are a peer's FIN or RST. Nothing is dropped:
///   `black_hole(false)` heals the partition and everything held flows on, in order, unless a peer
///   gave up in the meantime (its own timeout closing its end).
/// - `strand()`: every live connection goes silent for good, as one does when a NAT forgets it, a
///   laptop sleeps or a VPN switches: nothing is carried on it in either direction, and no FIN or
///   RST is ever sent (the proxy keeps both sockets open, holding what it read). New connections
///   are carried as before. Unlike the black hole, this never heals.
/// - `refuse(true)`: the listening socket is closed, so new connections are refused (ECONNREFUSED,
///   as from a server that is down); live ones carry on. `refuse(false)` listens again on the same
///   port.
///
/// Dropping the proxy ends its thread and every connection (closed normally, FIN).
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    control: tokio::sync::mpsc::UnboundedSender<Control>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// State the control calls and the proxy's tasks share.
struct Shared {
    upstream: SocketAddr,
    /// Whether the black hole is on; every pump waits for it to be off before reading on.
    hole: watch::Sender<bool>,
    /// Bumped by each `sever()`; a connection subscribed before the bump resets itself.
    sever: watch::Sender<u64>,
    /// Bumped by each `strand()`; a connection accepted before the bump carries nothing more.
    strand: watch::Sender<u64>,
    accepted: AtomicUsize,
    /// Ids of connections whose task still runs, so `sever()` can wait until they are gone.
    live: Mutex<HashSet<u64>>,
    gone: Condvar,
}

enum Control {
    /// Close the listening socket.
    Refuse(mpsc::Sender<()>),
    /// Listen on this (already bound) socket again.
    Listen(std::net::TcpListener, mpsc::Sender<()>),
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free port of 127.0.0.1; it accepts connections when this
    /// returns. Connections to the upstream are made per accepted connection, so the upstream need
    /// not be up yet.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy on 127.0.0.1");
        listener.set_nonblocking(true).expect("non-blocking proxy listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            hole: watch::Sender::new(false),
            sever: watch::Sender::new(0),
            strand: watch::Sender::new(0),
            accepted: AtomicUsize::new(0),
            live: Mutex::new(HashSet::new()),
            gone: Condvar::new(),
        });
        let (control, control_rx) = tokio::sync::mpsc::unbounded_channel();
        let (stop, stop_rx) = oneshot::channel();
        let task_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("proxy runtime");
                rt.block_on(serve(listener, task_shared, control_rx, stop_rx));
                // Dropping the runtime here cancels every connection task, closing its sockets.
            })
            .expect("spawn the fault proxy thread");
        FaultProxy { addr, shared, control, stop: Some(stop), thread: Some(thread) }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The upstream it forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Connections accepted since the start (severed and ended ones included).
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections whose task still runs (accepted and not yet ended).
    pub fn live_connections(&self) -> usize {
        self.shared.live.lock().unwrap().len()
    }

    /// Resets every live connection (RST to both peers); returns once they are all gone. New
    /// connections are accepted and carried as before.
    pub fn sever(&self) {
        let before: HashSet<u64> = self.shared.live.lock().unwrap().clone();
        self.shared.sever.send_modify(|generation| *generation += 1);
        let live = self.shared.live.lock().unwrap();
        let (_live, waited) = self
            .shared
            .gone
            .wait_timeout_while(live, CONTROL_LIMIT, |live| live.iter().any(|id| before.contains(id)))
            .unwrap();
        assert!(
            !waited.timed_out(),
            "fault proxy {}: severed connections still open after {CONTROL_LIMIT:?}",
            self.addr
        );
    }

    /// Every live connection goes silent for good (no FIN, no RST); new ones carry as before.
    /// See the type's documentation.
    pub fn strand(&self) {
        self.shared.strand.send_modify(|generation| *generation += 1);
    }

    /// Turns the black hole on (nothing is carried on any connection, old or new) or off (the
    /// held bytes flow on and carrying resumes). See the type's documentation.
    pub fn black_hole(&self, on: bool) {
        self.shared.hole.send_replace(on);
    }

    /// Stops listening (new connections are refused, live ones carry on) or listens again on the
    /// same port. Returns once the listening socket is closed or open again.
    pub fn refuse(&self, on: bool) {
        let (ack, done) = mpsc::channel();
        let cmd = if on {
            Control::Refuse(ack)
        } else {
            // Bound here, so a port taken meanwhile fails the test with a clear message.
            let listener = std::net::TcpListener::bind(self.addr)
                .unwrap_or_else(|e| panic!("fault proxy: listen on {} again: {e}", self.addr));
            listener.set_nonblocking(true).expect("non-blocking proxy listener");
            Control::Listen(listener, ack)
        };
        self.control.send(cmd).expect("fault proxy thread is gone");
        done.recv_timeout(CONTROL_LIMIT).expect("fault proxy did not take the refuse command");
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The accept loop, until `stop` fires (the proxy is dropped).
async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut listener = Some(TcpListener::from_std(listener).expect("register the proxy listener"));
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            cmd = control.recv() => match cmd {
                None => return,
                Some(Control::Refuse(ack)) => {
                    listener = None;
                    let _ = ack.send(());
                }
                Some(Control::Listen(std_listener, ack)) => {
                    listener = Some(TcpListener::from_std(std_listener).expect("register the proxy listener"));
                    let _ = ack.send(());
                }
            },
            accepted = accept(listener.as_ref()) => {
                let Ok((client, _)) = accepted else {
                    // E.g. out of descriptors: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let id = next_id;
                next_id += 1;
                // Subscribed and registered before the task runs, so a sever() from now on
                // covers this connection.
                let sever = shared.sever.subscribe();
                shared.live.lock().unwrap().insert(id);
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(id, client, sever, shared.clone()));
            }
        }
    }
}

async fn accept(listener: Option<&TcpListener>) -> io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// One client connection, from accept to its end; resets both sockets when severed or when a
/// direction fails.
async fn connection(id: u64, mut client: TcpStream, mut sever: watch::Receiver<u64>, shared: Arc<Shared>) {
    let mut upstream: Option<TcpStream> = None;
    let reset = tokio::select! {
        _ = sever.changed() => true,
        failed = carry(&mut client, &mut upstream, &shared) => failed,
    };
    if reset {
        let _ = client.set_zero_linger();
        if let Some(up) = &upstream {
            let _ = up.set_zero_linger();
        }
    }
    // Closed before the id leaves `live`, so sever() returns only after the RSTs went out.
    drop(client);
    drop(upstream);
    shared.live.lock().unwrap().remove(&id);
    shared.gone.notify_all();
}

/// Connects upstream (once the black hole is off) and carries both directions until both ended;
/// true when the connection must be reset (upstream unreachable, or a direction failed).
async fn carry(client: &mut TcpStream, upstream: &mut Option<TcpStream>, shared: &Shared) -> bool {
    let stranded = Stranded { born: *shared.strand.borrow(), strand: shared.strand.subscribe() };
    wait_open(&mut shared.hole.subscribe()).await;
    stranded.hold_if_stranded().await;
    let up = match TcpStream::connect(shared.upstream).await {
        Ok(up) => upstream.insert(up),
        // The closest a proxy can come to "connection refused" once it has accepted: a reset.
        Err(_) => return true,
    };
    let _ = client.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut up_read, mut up_write) = up.split();
    let outcome = tokio::try_join!(
        pump(&mut client_read, &mut up_write, shared.hole.subscribe(), stranded.clone()),
        pump(&mut up_read, &mut client_write, shared.hole.subscribe(), stranded),
    );
    outcome.is_err()
}

/// Copies one direction until EOF (passed on as a write shutdown, FIN) or an error; never moves a
/// byte, or the EOF, while the black hole is on.
async fn pump(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    mut hole: watch::Receiver<bool>,
    stranded: Stranded,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        wait_open(&mut hole).await;
        stranded.hold_if_stranded().await;
        let got = from.read(&mut buf).await;
        // Whatever the read brought as the black hole came on (bytes, EOF, an error) waits for it to go off.
        wait_open(&mut hole).await;
        stranded.hold_if_stranded().await;
        match got? {
            0 => return to.shutdown().await,
            n => to.write_all(&buf[..n]).await?,
        }
    }
}

/// Whether a connection has been stranded: `strand()` was called after it was accepted.
#[derive(Clone)]
struct Stranded {
    born: u64,
    strand: watch::Receiver<u64>,
}

impl Stranded {
    /// Never returns once the connection is stranded (its sockets stay open, silent).
    async fn hold_if_stranded(&self) {
        if *self.strand.borrow() > self.born {
            std::future::pending::<()>().await;
        }
    }
}

async fn wait_open(hole: &mut watch::Receiver<bool>) {
    // Err only when the sender is gone, which happens only as the proxy shuts down.
    let _ = hole.wait_for(|on| !*on).await;
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// An upstream that echoes every connection's bytes back.
    fn echo_server() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 || conn.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(conn: &mut TcpStream, text: &[u8]) -> io::Result<Vec<u8>> {
        conn.write_all(text)?;
        let mut got = vec![0u8; text.len()];
        conn.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn a_stranded_connection_stays_open_and_silent_while_new_ones_carry() {
        let proxy = FaultProxy::start(echo_server());
        let mut old = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut old, b"before").unwrap(), b"before");
        proxy.strand();
        old.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let err = round_trip(&mut old, b"after").expect_err("a stranded connection carried bytes");
        // Silent, not closed: the read timed out, it did not see EOF or a reset.
        assert!(matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{err:?}");
        let mut new = TcpStream::connect(proxy.addr()).unwrap();
        new.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut new, b"fresh").unwrap(), b"fresh");
    }
}
