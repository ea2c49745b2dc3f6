//! The machine a run happened on, as the report and the docs state it: CPUs, CPU model,
//! kernel, memory, fio's version.

use std::process::Command;

/// What the numbers were measured on.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// CPUs this process may run on.
    pub cpu_count: usize,
    /// "model name" from /proc/cpuinfo.
    pub cpu_model: String,
    /// The kernel release (uname -r).
    pub kernel: String,
    /// MemTotal from /proc/meminfo.
    pub memory_bytes: u64,
    /// `fio --version`.
    pub fio: String,
}

/// Describe this machine; facts that cannot be read are left "unknown" (or 0).
pub fn describe() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Machine {
        cpu_count: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        memory_bytes: field(&meminfo, "MemTotal")
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024),
        fio: fio_version().unwrap_or_else(|| "not found".into()),
    }
}

/// The 1, 5 and 15 minute load averages ("0.12 0.30 0.25"): how busy the machine was besides
/// the benchmark.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `fio --version`, if fio runs.
pub fn fio_version() -> Option<String> {
    let out = Command::new("fio").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The value of the first "key : value" line with this key.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_from_key_value_lines() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: a b\n";
        assert_eq!(field(text, "model name").as_deref(), Some("AMD EPYC"));
        assert_eq!(field(text, "missing"), None);
    }
}
