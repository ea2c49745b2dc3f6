//! redis: a server with `appendonly yes`, `appendfsync always` on the target, and
//! redis-benchmark SET from one client on the host: every SET is appended and fsync'd before
//! its reply.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{Place, Sizes};
use crate::verbs::bench::process::{self, Stop};

/// How long the server has to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Bytes per value.
const VALUE_BYTES: u32 = 100;

/// The result this benchmark reports.
pub fn names(sizes: Sizes) -> Vec<(String, String)> {
    vec![(
        "redis SET, appendfsync always".into(),
        format!(
            "redis-server --appendonly yes --appendfsync always; redis-benchmark -t set -c 1 \
             -n {} -d {VALUE_BYTES} -r 100000",
            sizes.redis_requests
        ),
    )]
}

/// SETs per second.
pub fn run(place: &Place, sizes: Sizes) -> Result<Vec<f64>, Stop> {
    let dir = place.dir("redis")?;
    let port = free_port()?;
    let mut cmd = place.command("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
        .arg(&dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            if place.durable() { "always" } else { "no" },
            "--save",
            "",
        ])
        .args(["--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let server = Server(process::spawn(&mut cmd, "redis-server")?);
    wait_for_port(port)?;
    let mut bench = std::process::Command::new("redis-benchmark");
    bench
        .args([
            "-p",
            &port.to_string(),
            "-t",
            "set",
            "-c",
            "1",
            "-r",
            "100000",
        ])
        .args(["-n", &sizes.redis_requests.to_string()])
        .args(["-d", &VALUE_BYTES.to_string(), "--csv"]);
    let out = place.run(&mut bench)?;
    drop(server);
    let rps = out
        .stdout
        .lines()
        .find(|l| l.starts_with("\"SET\""))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse::<f64>().ok())
        .ok_or_else(|| {
            Stop::Failed(format!(
                "redis-benchmark printed no SET rate: {}",
                out.stdout.trim()
            ))
        })?;
    Ok(vec![rps])
}

/// The running server; stopped (its whole process group) when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        process::stop_group(&mut self.0);
    }
}

/// A TCP port free on the loopback interface right now.
fn free_port() -> Result<u16, Stop> {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Stop::Failed(format!("no free port: {e}")))
}

/// Wait until something listens on `port`.
fn wait_for_port(port: u16) -> Result<(), Stop> {
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if crate::verbs::bench::interrupt::interrupted() {
            return Err(Stop::Interrupted);
        }
        if TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Stop::Failed(format!(
        "redis-server did not listen on port {port} within {} s",
        START_TIMEOUT.as_secs()
    )))
}
