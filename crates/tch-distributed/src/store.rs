//! The rendezvous key-value store: c10d's TCPStore, as a server or a client.
use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::IntoRawFd;
use std::ptr::{self, NonNull};
use std::time::Duration;

use crate::c_args::{cstring, duration_ms};
use crate::error::{check, DistError, Result};
use crate::ffi;

/// How to open a [`Store::tcp`].
#[derive(Debug, Clone)]
pub struct TcpStoreOptions {
    /// Address of the server (the rank-0 host, `MASTER_ADDR`).
    pub host: String,
    /// Port of the server (`MASTER_PORT`); 0 for a server means "any free port".
    pub port: u16,
    /// Host the store in this process (rank 0 does, unless torchrun's agent does).
    pub is_server: bool,
    /// The number of processes that will connect, when known (the world size).
    pub world_size: Option<usize>,
    /// A server waits for `world_size` clients before returning.
    pub wait_for_workers: bool,
    /// How long to wait for the server (client) or the workers (server).
    pub timeout: Duration,
}

/// A c10d TCPStore handle. Process groups keep their own reference to the store, so
/// dropping this after creating a group is fine.
pub struct Store {
    raw: NonNull<ffi::tchd_store>,
    host: String,
}

// SAFETY: c10d stores are used from many threads inside libtorch; every call locks.
unsafe impl Send for Store {}
unsafe impl Sync for Store {}

impl Store {
    /// Opens a TCPStore. A server that cannot bind gives [`crate::ErrorKind::AddressInUse`];
    /// a client that finds no server within the timeout gives [`crate::ErrorKind::Timeout`].
    pub fn tcp(opts: &TcpStoreOptions) -> Result<Store> {
        if opts.host.is_empty() {
            return Err(DistError::invalid("the store address is empty: set MASTER_ADDR (e.g. localhost)"));
        }
        if !opts.is_server && opts.port == 0 {
            return Err(DistError::invalid(
                "port 0 is not a port a client can connect to: set MASTER_PORT to the port rank 0 listens on",
            ));
        }
        if opts.world_size == Some(0) {
            return Err(DistError::invalid("world size must be at least 1"));
        }
        let host = CString::new(opts.host.as_str())
            .map_err(|_| DistError::invalid("the store address contains a NUL byte"))?;
        // c10d's server would listen on every interface; the store has no
        // authentication, so the server socket is bound here to the rendezvous address
        // alone (loopback for a single-node run) and handed over to c10d.
        let (listen_fd, port) = if opts.is_server {
            let listener = bind_server(&opts.host, opts.port)?;
            let port = listener.local_addr().map(|a| a.port()).unwrap_or(opts.port);
            (listener.into_raw_fd(), port)
        } else {
            (-1, opts.port)
        };
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_store_tcp(
                host.as_ptr(),
                port,
                opts.is_server as i32,
                opts.world_size.map(|w| w as i64).unwrap_or(-1),
                opts.wait_for_workers as i32,
                duration_ms(opts.timeout),
                listen_fd,
                &mut out,
                &mut err,
            )
        };
        check(status, err).map_err(|e| {
            let role = if opts.is_server { "hosting" } else { "connecting to" };
            let hint = match e.kind() {
                crate::ErrorKind::AddressInUse => format!(
                    " (port {} is taken: is another job or an earlier run still alive? choose another MASTER_PORT)",
                    opts.port
                ),
                crate::ErrorKind::Timeout if opts.is_server => format!(
                    " (not every one of the {} ranks connected within {:?}: did they all start, with the same MASTER_ADDR/MASTER_PORT?)",
                    opts.world_size.unwrap_or(0),
                    opts.timeout
                ),
                crate::ErrorKind::Timeout => format!(
                    " (nobody answered within {:?}: is rank 0 running, and are MASTER_ADDR/MASTER_PORT the ones it uses?)",
                    opts.timeout
                ),
                _ => String::new(),
            };
            e.context(format!("{role} the rendezvous store at {}:{}{hint}", opts.host, opts.port))
        })?;
        Ok(Store { raw: NonNull::new(out).expect("shim returned a null store"), host: opts.host.clone() })
    }

    pub(crate) fn raw(&self) -> *mut ffi::tchd_store {
        self.raw.as_ptr()
    }

    /// The address this store was opened with.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port the server listens on (the real one when opened with port 0).
    pub fn port(&self) -> Result<u16> {
        let mut port = 0u16;
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_store_port(self.raw(), &mut port, &mut err) }, err)?;
        Ok(port)
    }

    /// Stores `value` under `key`, replacing what was there (`store.set`).
    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let key = cstring(key)?;
        let mut err = ptr::null_mut();
        let status =
            unsafe { ffi::tchd_store_set(self.raw(), key.as_ptr(), value.as_ptr(), value.len(), &mut err) };
        check(status, err)
    }

    /// Waits (up to the store's timeout) until `key` is set, then returns its value.
    pub fn get(&self, key: &str) -> Result<Vec<u8>> {
        let ckey = cstring(key)?;
        let mut data = ptr::null_mut();
        let mut len = 0usize;
        let mut err = ptr::null_mut();
        let status = unsafe { ffi::tchd_store_get(self.raw(), ckey.as_ptr(), &mut data, &mut len, &mut err) };
        check(status, err).map_err(|e| e.context(format!("store get {key:?}")))?;
        Ok(take_bytes(data, len))
    }

    /// Sets `key` to `desired` if it holds `expected` (an absent key holds the empty
    /// value) and returns what it holds afterwards, atomically: `store.compare_set`.
    pub fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let ckey = cstring(key)?;
        let mut data = ptr::null_mut();
        let mut len = 0usize;
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_store_compare_set(
                self.raw(),
                ckey.as_ptr(),
                expected.as_ptr(),
                expected.len(),
                desired.as_ptr(),
                desired.len(),
                &mut data,
                &mut len,
                &mut err,
            )
        };
        check(status, err).map_err(|e| e.context(format!("store compare_set {key:?}")))?;
        Ok(take_bytes(data, len))
    }

    /// Atomically adds `delta` to the counter at `key` and returns the new value.
    pub fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let key = cstring(key)?;
        let mut value = 0i64;
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_store_add(self.raw(), key.as_ptr(), delta, &mut value, &mut err) }, err)?;
        Ok(value)
    }
}

/// Copies out a value the shim malloc'ed (`len` bytes, at least 1 allocated) and frees it.
fn take_bytes(data: *mut u8, len: usize) -> Vec<u8> {
    // SAFETY: the shim handed over ownership of `len` readable bytes at `data`.
    let bytes = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
    unsafe { ffi::tchd_free_bytes(data) };
    bytes
}

impl Drop for Store {
    fn drop(&mut self) {
        unsafe { ffi::tchd_store_free(self.raw.as_ptr()) }
    }
}

/// Whether `host` names the loopback interface (where a store server binds, and what
/// [`Rendezvous::is_loopback`](crate::Rendezvous::is_loopback) asks).
pub(crate) fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.eq_ignore_ascii_case("ip6-localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The address a store server listens on: the loopback address for `localhost`
/// (IPv4 first), otherwise the first address `host` resolves to, which must be one of
/// this machine's.
pub(crate) fn server_bind_address(host: &str, port: u16) -> Result<SocketAddr> {
    if is_loopback(host) && host.parse::<IpAddr>().is_err() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            DistError::invalid(format!(
                "the rendezvous address {host:?} does not resolve ({e}): set MASTER_ADDR to this node's address"
            ))
        })?
        .collect();
    addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()).copied().ok_or_else(|| {
        DistError::invalid(format!("the rendezvous address {host:?} resolves to nothing: set MASTER_ADDR"))
    })
}

fn bind_server(host: &str, port: u16) -> Result<TcpListener> {
    let addr = server_bind_address(host, port)?;
    TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => DistError::new(
            crate::ErrorKind::AddressInUse,
            format!(
                "hosting the rendezvous store at {host}:{port}: {e} (port {port} is taken: is another job or an earlier run still alive? choose another MASTER_PORT)"
            ),
        ),
        std::io::ErrorKind::AddrNotAvailable => DistError::invalid(format!(
            "hosting the rendezvous store at {host}:{port}: {addr} is not an address of this machine ({e}); rank 0's node must be the one MASTER_ADDR names"
        )),
        _ => DistError::new(
            crate::ErrorKind::Network,
            format!("hosting the rendezvous store at {host}:{port}: cannot listen on {addr}: {e}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for h in ["localhost", "127.0.0.1", "127.1.2.3", "::1"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["10.0.0.1", "node0", "0.0.0.0"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
