//! Progress of a long copy (put/get), drawn on stderr only when stderr is a terminal: a script
//! reading stderr sees only "iris: ..." lines.

use std::cell::Cell;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A single file at least this large is long work even without -r.
const LONG_COPY_BYTES: u64 = 64 << 20;

/// What a copy will move, counted before it starts (so the bar has an end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Files, symlinks and directories.
    pub entry_count: u64,
    /// Bytes of regular files.
    pub size_bytes: u64,
}

/// A progress bar, or nothing when no one would see it.
pub struct Progress {
    bar: Option<ProgressBar>,
    entries_total: u64,
    entries_done: Cell<u64>,
}

impl Progress {
    /// Whether a bar would be seen at all: stderr is a terminal.
    fn visible() -> bool {
        std::io::stderr().is_terminal()
    }

    /// A bar for a copy if one would be seen and the work is long: recursive, or at least
    /// [`LONG_COPY_BYTES`]. `count` (a walk of the sources) runs only when stderr is a terminal.
    pub fn for_copy(recursive: bool, count: impl FnOnce() -> Plan) -> Progress {
        if !Progress::visible() {
            return Progress::none();
        }
        let plan = count();
        if recursive || plan.size_bytes >= LONG_COPY_BYTES {
            Progress::start(plan)
        } else {
            Progress::none()
        }
    }

    /// No bar; warnings still reach stderr.
    pub fn none() -> Progress {
        Progress {
            bar: None,
            entries_total: 0,
            entries_done: Cell::new(0),
        }
    }

    /// A bar over `plan`, drawn on stderr.
    fn start(plan: Plan) -> Progress {
        let style = ProgressStyle::with_template(
            "{bytes:>10}/{total_bytes:<10} [{bar:30}] {bytes_per_sec:>12} {msg}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar =
            ProgressBar::with_draw_target(Some(plan.size_bytes), ProgressDrawTarget::stderr())
                .with_style(style);
        let progress = Progress {
            bar: Some(bar),
            entries_total: plan.entry_count,
            entries_done: Cell::new(0),
        };
        progress.show_entries();
        progress
    }

    /// `n` more bytes copied.
    pub fn copied(&self, size_bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(size_bytes);
        }
    }

    /// One more file, symlink or directory done.
    pub fn entry_done(&self) {
        self.entries_done.set(self.entries_done.get() + 1);
        self.show_entries();
    }

    /// Print "iris: LINE" on stderr above the bar.
    pub fn warn(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("iris: {line}")),
            None => eprintln!("iris: {line}"),
        }
    }

    /// Remove the bar from the terminal.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn show_entries(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "{}/{} files",
                self.entries_done.get(),
                self.entries_total
            ));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // An error ends the copy early: clear the bar so the error line stands alone.
        self.finish();
    }
}
