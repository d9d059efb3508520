//! A TCP relay on 127.0.0.1 that can strand its live connections: they go silent for good, with
//! no FIN and no RST, as when a NAT forgets a connection or a laptop sleeps; new connections are
//! carried as before (the network has healed).

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The relay, serving until it is dropped (every connection then ends with a FIN).
pub(super) struct Relay {
    addr: SocketAddr,
    /// Bumped by each `strand()`: a connection accepted before the bump carries nothing more.
    strand: watch::Sender<u64>,
    stop: CancellationToken,
}

impl Relay {
    /// Listens on a free port of 127.0.0.1 and relays each connection to `upstream`.
    pub(super) async fn start(upstream: SocketAddr) -> anyhow::Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("cannot listen on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        let strand = watch::Sender::new(0u64);
        let stop = CancellationToken::new();
        tokio::spawn(accept(listener, upstream, strand.clone(), stop.clone()));
        Ok(Relay { addr, strand, stop })
    }

    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every live connection goes silent for good; new ones are carried.
    pub(super) fn strand(&self) {
        self.strand.send_modify(|generation| *generation += 1);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, strand: watch::Sender<u64>, stop: CancellationToken) {
    loop {
        let client = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => client,
                Err(_) => continue,
            },
        };
        let born = *strand.borrow();
        let (stranded, stop) = (strand.subscribe(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = carry(client, upstream, stranded, born) => {}
            }
        });
    }
}

/// Carries one connection both ways until it ends; once stranded, holds both sockets open and
/// silent (what the relay had read and not yet written is lost, as on a dead path).
async fn carry(mut client: TcpStream, upstream: SocketAddr, mut stranded: watch::Receiver<u64>, born: u64) {
    let Ok(mut up) = TcpStream::connect(upstream).await else { return };
    let _ = (client.set_nodelay(true), up.set_nodelay(true));
    let strand = async {
        let _ = stranded.wait_for(|generation| *generation > born).await;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut up) => {}
        () = strand => std::future::pending::<()>().await,
    }
}
