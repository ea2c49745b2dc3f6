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
    /// The page policy of the file system holding the scratch directory: its `huge=` mount
    /// option (tmpfs; "never" when absent) and the kernel's shmem setting. 2 MiB pages change
    /// what a mapped volume costs (TLB misses), so a reader of the figures needs it.
    pub pages: String,
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
        pages: String::new(),
    }
}

/// The page policy of the file system `dir` lives on (see [`Machine::pages`]), e.g.
/// "tmpfs /dev/shm huge=never, shmem_enabled never".
pub fn page_policy(dir: &std::path::Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let shmem = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .ok()
        .and_then(|s| chosen(&s))
        .unwrap_or_else(|| "unknown".into());
    let mount = mount_of(&mounts, &dir);
    match mount {
        Some((fs, point, options)) => {
            let huge = options
                .split(',')
                .find_map(|o| o.strip_prefix("huge="))
                .unwrap_or("never");
            if fs == "tmpfs" {
                format!("{fs} {point} huge={huge}, shmem_enabled {shmem}")
            } else {
                format!("{fs} {point}, shmem_enabled {shmem}")
            }
        }
        None => format!("unknown file system, shmem_enabled {shmem}"),
    }
}

/// The (type, mount point, options) of the last-listed mount with the longest mount point
/// that holds `dir` (later mounts over the same point hide earlier ones).
fn mount_of<'a>(mounts: &'a str, dir: &std::path::Path) -> Option<(&'a str, &'a str, &'a str)> {
    let mut best: Option<(&str, &str, &str)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, point, fs, options, ..] = f[..] else {
            continue;
        };
        if dir.starts_with(point) && best.is_none_or(|(_, p, _)| point.len() >= p.len()) {
            best = Some((fs, point, options));
        }
    }
    best
}

/// The bracketed choice of a sysfs setting ("always [never] advise" -> "never").
fn chosen(setting: &str) -> Option<String> {
    let start = setting.find('[')? + 1;
    let end = start + setting[start..].find(']')?;
    Some(setting[start..end].to_string())
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
    fn the_page_policy_comes_from_the_innermost_last_mount_and_the_bracketed_setting() {
        let mounts = "proc /proc proc rw 0 0\n\
                      tmpfs /dev/shm tmpfs rw,relatime 0 0\n\
                      tmpfs /dev/shm tmpfs rw,relatime,huge=within_size 0 0\n\
                      /dev/loop0 /dev/shm/x/m ext4 rw 0 0\n";
        let at = |p: &str| mount_of(mounts, std::path::Path::new(p));
        assert_eq!(
            at("/dev/shm/iris-bench-1"),
            Some(("tmpfs", "/dev/shm", "rw,relatime,huge=within_size"))
        );
        assert_eq!(at("/dev/shm/x/m/f").map(|m| m.0), Some("ext4"));
        assert_eq!(at("/etc"), None);
        assert_eq!(
            chosen("always within_size advise [never] deny force\n").as_deref(),
            Some("never")
        );
        assert_eq!(chosen("none"), None);
    }

    #[test]
    fn fields_are_read_from_key_value_lines() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: a b\n";
        assert_eq!(field(text, "model name").as_deref(), Some("AMD EPYC"));
        assert_eq!(field(text, "missing"), None);
    }
}
