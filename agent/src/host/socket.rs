//! The bytes a peer sent that wait unread in the socket's receive queue
//! (`FIONREAD`, `SIOCINQ` for TCP): a backlog the kernel keeps, read by
//! the control thread whatever the worker that owns the connection does.

use std::os::fd::RawFd;

use super::HostError;

/// Bytes waiting unread on socket `fd`.
///
/// `fd` may have been closed and reused since it was recorded: the call
/// only reads a count, on whatever the descriptor now is, and fails for
/// what is not a socket or a file.
///
/// # Errors
/// When the kernel refuses (`fd` closed, not a socket).
pub fn unread(fd: RawFd) -> Result<usize, HostError> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int to the pointer given, which points
    // to a live local; a bad descriptor is an error, not undefined.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &raw mut n) };
    if rc != 0 {
        return Err(HostError::Sys {
            call: "ioctl(FIONREAD)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;

    #[test]
    fn unread_bytes_of_a_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(unread(s.as_raw_fd()).unwrap(), 0);
        c.write_all(&[7; 300]).unwrap();
        let t = std::time::Instant::now();
        while unread(s.as_raw_fd()).unwrap() < 300 && t.elapsed().as_secs() < 2 {
            std::thread::yield_now();
        }
        assert_eq!(unread(s.as_raw_fd()).unwrap(), 300);
        assert!(unread(-1).is_err());
    }
}
