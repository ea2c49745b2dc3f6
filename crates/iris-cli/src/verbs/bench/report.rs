//! A finished run: what was measured where, and its rendering as text for the terminal and as
//! Markdown for docs/BENCHMARKS.md.

use super::apps::AppResult;
use super::goals::Goal;
use super::machine::Machine;
use super::results::CellResult;
use super::table;
use super::targets::TargetKind;
use crate::units::human_bytes;

/// Everything one run produced.
#[derive(Clone, Debug)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// The command line, as typed.
    pub command: String,
    /// When the run started, UTC.
    pub started_utc: String,
    /// Load averages (1, 5, 15 minutes) when the run started and when it ended.
    pub load: [String; 2],
    /// Seconds each fio run measured.
    pub runtime_secs: u64,
    /// Runs of each fio cell on each target (the median's is reported).
    pub rounds: u32,
    /// Seconds each memcpy run measured.
    pub memcpy_secs: f64,
    /// Bytes of each job's file.
    pub file_bytes: u64,
    /// Whether this was the quick smoke test.
    pub quick: bool,
    /// Targets that ran, in report order.
    pub kinds: Vec<TargetKind>,
    /// Targets that did not, and why.
    pub skipped: Vec<(TargetKind, String)>,
    /// Per cell, per target.
    pub results: Vec<CellResult>,
    /// The goals against this run.
    pub goals: Vec<Goal>,
    /// Applications (with --apps).
    pub apps: Vec<AppResult>,
}

impl Report {
    /// Two lines naming the machine and the run's parameters (the chart's subtitle).
    pub fn subtitle(&self) -> Vec<String> {
        let m = &self.machine;
        vec![
            format!(
                "{} CPUs ({}), Linux {}, {}, run {} UTC",
                m.cpu_count, m.cpu_model, m.kernel, m.fio, self.started_utc
            ),
            format!(
                "fio psync, queue depth 1, {} s per cell{}, one {} file per job; all targets on /dev/shm memory",
                self.runtime_secs,
                self.rounds_note(),
                human_bytes(self.file_bytes),
            ),
        ]
    }

    /// ", median of N rounds" when cells ran more than once, else nothing.
    fn rounds_note(&self) -> String {
        if self.rounds > 1 {
            format!(", median of {} rounds", self.rounds)
        } else {
            String::new()
        }
    }

    /// Goals met, missed and not measured.
    fn goal_counts(&self) -> (usize, usize, usize) {
        let count = |want: Option<bool>| self.goals.iter().filter(|g| g.met() == want).count();
        (count(Some(true)), count(Some(false)), count(None))
    }

    /// The terminal report: throughput, latency, skipped targets, missed goals, applications.
    pub fn text(&self) -> String {
        let kinds = &self.kinds;
        let mut out = String::new();
        out.push_str(&table::throughput(&self.results, kinds).text());
        out.push('\n');
        out.push_str(&table::latency(&self.results, kinds).text());
        if !self.apps.is_empty() {
            out.push('\n');
            out.push_str(&table::apps(&self.apps).text());
        }
        out.push('\n');
        for (kind, why) in &self.skipped {
            out.push_str(&format!("skipped {}: {why}\n", kind.name()));
        }
        let (met, missed, unmeasured) = self.goal_counts();
        out.push_str(&format!(
            "goals of issues #6 and #4: {met} met, {missed} missed, {unmeasured} not measured\n"
        ));
        let misses: Vec<Goal> = self
            .goals
            .iter()
            .filter(|g| g.met() == Some(false))
            .cloned()
            .collect();
        if !misses.is_empty() {
            out.push_str(&table::goals(&misses).text());
        }
        out
    }

    /// The Markdown body for docs/BENCHMARKS.md: machine, command, tables, goals, skips.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let kinds = &self.kinds;
        let mut out = String::new();
        out.push_str(&format!(
            "- Machine: {} CPUs, {}, {} RAM, Linux {}\n- Pages: {}\n- fio: {}\n- Run: {} (UTC)\n\
             - Command: `{}`\n- Each fio cell: {} s{}; each job its own {} file; memcpy runs: {:.1} s\n\
             - Load average (1, 5, 15 min): {} at the start, {} at the end\n\n",
            m.cpu_count,
            m.cpu_model,
            human_bytes(m.memory_bytes),
            m.kernel,
            m.pages,
            m.fio,
            self.started_utc,
            self.command,
            self.runtime_secs,
            self.rounds_note(),
            human_bytes(self.file_bytes),
            self.memcpy_secs,
            self.load[0],
            self.load[1]
        ));
        if !self.skipped.is_empty() {
            for (kind, why) in &self.skipped {
                out.push_str(&format!("- Skipped {}: {why}\n", kind.name()));
            }
            out.push('\n');
        }
        out.push_str("### Throughput (IOPS)\n\n");
        out.push_str(&table::throughput(&self.results, kinds).markdown());
        out.push_str("\n### Latency (mean / p99, µs)\n\n");
        out.push_str(&table::latency(&self.results, kinds).markdown());
        if !self.apps.is_empty() {
            out.push_str("\n### Applications (Iris against ext4 on the same medium)\n\n");
            out.push_str(&table::apps(&self.apps).markdown());
            out.push_str(
                "\n`tmpfs no-sync`: the same application on tmpfs with its syncs turned off \
                 (`appendfsync no`, `synchronous=OFF`; db_bench runs as it is, its writes not \
                 synced one by one): what it reaches when durability costs nothing on the \
                 kernel's path. `iris/no-sync` at 1.00x or more: Iris gives it durability for \
                 free.\n\n",
            );
            for a in &self.apps {
                out.push_str(&format!("- {}: `{}`\n", a.name, a.detail));
            }
        }
        let (met, missed, unmeasured) = self.goal_counts();
        out.push_str(&format!(
            "\n### Goals of issues #6 and #4 ({met} met, {missed} missed, {unmeasured} not measured)\n\n"
        ));
        out.push_str(&table::goals(&self.goals).markdown());
        out
    }
}
