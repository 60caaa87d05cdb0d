//! A connection's byte stream: plain TCP, or TLS over TCP (RFC 6733 §13.1,
//! TLS/TCP). [`Stream`] is an enum, not a trait object: on plain TCP a read
//! or write is the socket's own, behind one match.
//!
//! TLS runs on rustls's sans-io connection driven by the socket's
//! readiness, as the plain path is: a read takes the records the socket has
//! (`read_tls`), decrypts them (`process_new_packets`) and hands the
//! plaintext on; a write hands plaintext to rustls and writes the records
//! out (`write_tls`). The handshake is done before (tokio-rustls), on
//! connect.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{Interest, Ready};
use tokio::net::TcpStream;

use crate::tls::{CertNames, ClientTls, ServerTls};

/// Records read from the socket per read at most, TLS; rustls holds at most
/// 16 KiB of undelivered plaintext, so the plaintext is taken after each.
const TLS_READS: usize = 16;

/// Plain TCP or TLS over TCP.
#[derive(Debug)]
pub(crate) enum Stream {
    /// RFC 6733 §2.1 TCP.
    Tcp(TcpStream),
    /// §13.1 TLS/TCP, handshake done.
    Tls(Box<Tls>),
}

/// A TLS connection after its handshake.
#[derive(Debug)]
pub(crate) struct Tls {
    tcp: TcpStream,
    conn: rustls::Connection,
    /// Decrypted bytes rustls holds that were not taken yet.
    plain: usize,
    /// The peer sent close_notify, TCP ended, or rustls refused what the
    /// peer sent (the connection is then unusable and rustls is not asked
    /// again).
    ended: bool,
}

/// A handshake that failed: why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// TLS or socket error.
    #[error("TLS handshake failed: {0}")]
    Failed(#[source] io::Error),
    /// No handshake within the time.
    #[error("TLS handshake not done within {0:?}")]
    Timeout(Duration),
}

/// The socket as rustls's `Read` and `Write`: non-blocking, `WouldBlock`
/// clears tokio's readiness.
struct Io<'a>(&'a TcpStream);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream {
    /// The TCP socket under the stream.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(t) => &t.tcp,
        }
    }

    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp().peer_addr()
    }

    /// The names of the certificate the peer presented (TLS with one).
    pub(crate) fn peer_names(&self) -> Option<CertNames> {
        match self {
            Stream::Tcp(_) => None,
            Stream::Tls(t) => t
                .conn
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| CertNames::of(c)),
        }
    }

    /// Waits for `interest`; a TLS stream also waits to write the records
    /// rustls holds, and is readable at once while it holds plaintext.
    pub(crate) async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        match self {
            Stream::Tcp(s) => s.ready(interest).await,
            Stream::Tls(t) => {
                if t.plain > 0 || t.ended {
                    return Ok(Ready::READABLE);
                }
                let interest = if t.conn.wants_write() {
                    interest | Interest::WRITABLE
                } else {
                    interest
                };
                t.tcp.ready(interest).await
            }
        }
    }

    /// Reads what the socket has into `buf` without blocking: `Ok(0)` at the
    /// end of the stream, `WouldBlock` when there is nothing.
    pub(crate) fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_read_buf(buf),
            Stream::Tls(t) => t.try_read_buf(buf),
        }
    }

    /// Writes from `data` without blocking; `WouldBlock` when nothing could
    /// be taken. A TLS stream takes the plaintext into rustls and writes the
    /// records out as the socket allows.
    pub(crate) fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.try_write(data),
            Stream::Tls(t) => t.try_write(data),
        }
    }

    /// Writes the records a TLS stream holds, as the socket allows (plain
    /// TCP holds none).
    #[inline]
    pub(crate) fn flush_some(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(_) => Ok(()),
            Stream::Tls(t) => t.flush_records(),
        }
    }

    /// Writes all of `data` and what the stream holds, waiting while the
    /// socket is full. The wait is an await: tokio learns that the socket
    /// has room (or an error) only from its reactor, so retrying a
    /// `WouldBlock` without one would spin on the worker forever, a
    /// timeout around it included.
    pub(crate) async fn write_all(&mut self, mut data: &[u8]) -> io::Result<()> {
        loop {
            self.flush_some_or_wait().await?;
            if data.is_empty() {
                return Ok(());
            }
            match self.try_write(data) {
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp().writable().await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes out what a TLS stream holds; waits while the socket is full.
    async fn flush_some_or_wait(&mut self) -> io::Result<()> {
        loop {
            match self.flush_some() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            let Stream::Tls(t) = self else { return Ok(()) };
            if !t.conn.wants_write() {
                return Ok(());
            }
            t.tcp.ready(Interest::WRITABLE).await?;
        }
    }

    /// Ends the output: TLS close_notify (RFC 8446 §6.1), then the TCP FIN.
    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        if let Stream::Tls(t) = self {
            t.conn.send_close_notify();
        }
        self.flush_some_or_wait().await?;
        let tcp = match self {
            Stream::Tcp(s) => s,
            Stream::Tls(t) => &mut t.tcp,
        };
        tokio::io::AsyncWriteExt::shutdown(tcp).await
    }

    /// Reads into `buf`, waiting for bytes; `Ok(0)` at the end.
    pub(crate) async fn read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            self.ready(Interest::READABLE).await?;
            match self.try_read_buf(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
    }

    /// The TLS handshake of an accepted connection (server side), within
    /// `limit`.
    pub(crate) async fn accept(
        tcp: TcpStream,
        tls: &ServerTls,
        limit: Duration,
    ) -> Result<Stream, HandshakeError> {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
        let s = tokio::time::timeout(limit, acceptor.accept(tcp))
            .await
            .map_err(|_| HandshakeError::Timeout(limit))?
            .map_err(HandshakeError::Failed)?;
        let (tcp, conn) = s.into_inner();
        Tls::opened(tcp, rustls::Connection::Server(conn))
    }

    /// The TLS handshake of a dialled connection (client side), within
    /// `limit`. `name` is the peer's host name (SNI); the certificate's
    /// names are checked against the CEA's Origin-Host afterwards.
    pub(crate) async fn connect(
        tcp: TcpStream,
        tls: &ClientTls,
        name: &str,
        limit: Duration,
    ) -> Result<Stream, HandshakeError> {
        let server = rustls_pki_types::ServerName::try_from(name.to_owned())
            .map_err(|e| HandshakeError::Failed(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
        let connector = tokio_rustls::TlsConnector::from(tls.config());
        let s = tokio::time::timeout(limit, connector.connect(server, tcp))
            .await
            .map_err(|_| HandshakeError::Timeout(limit))?
            .map_err(HandshakeError::Failed)?;
        let (tcp, conn) = s.into_inner();
        Tls::opened(tcp, rustls::Connection::Client(conn))
    }
}

impl Tls {
    /// After the handshake: what arrived with its last flight is decrypted
    /// already (the CER may come with the client's Finished).
    fn opened(tcp: TcpStream, mut conn: rustls::Connection) -> Result<Stream, HandshakeError> {
        let st = conn
            .process_new_packets()
            .map_err(|e| HandshakeError::Failed(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        Ok(Stream::Tls(Box::new(Tls {
            tcp,
            plain: st.plaintext_bytes_to_read(),
            ended: st.peer_has_closed(),
            conn,
        })))
    }

    /// Moves the plaintext rustls holds to the end of `buf`.
    fn take_plain(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if self.plain == 0 {
            return Ok(0);
        }
        let start = buf.len();
        buf.resize(start + self.plain, 0);
        let n = match self.conn.reader().read(&mut buf[start..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        };
        buf.truncate(start + n);
        self.plain -= n.min(self.plain);
        Ok(n)
    }

    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let mut got = self.take_plain(buf)?;
        for _ in 0..TLS_READS {
            if self.ended {
                break;
            }
            match self.conn.read_tls(&mut Io(&self.tcp)) {
                Ok(0) => self.ended = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
            let st = match self.conn.process_new_packets() {
                Ok(st) => st,
                Err(e) => {
                    // The alert rustls queued goes out before the close.
                    self.ended = true;
                    let _ = self.flush_records();
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            };
            self.plain = st.plaintext_bytes_to_read();
            self.ended |= st.peer_has_closed();
            got += self.take_plain(buf)?;
            // Post-handshake messages (TLS 1.3 key updates) may want an answer.
            if self.conn.wants_write() {
                let _ = self.flush_records();
            }
        }
        match got {
            0 if self.ended => Ok(0),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn try_write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.flush_records()?;
        let n = self.conn.writer().write(data)?;
        match self.flush_records() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if n == 0 && !data.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Writes the records rustls holds until none are left
    /// (`Ok`) or the socket is full (`WouldBlock`).
    fn flush_records(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut Io(&self.tcp))? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }
}
