//! The progress bar of a benchmark run: one step per fio run, memcpy run, layout and
//! application, drawn on stderr only when stderr is a terminal (a script reading stderr sees
//! only "iris: ..." lines).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress over a known number of steps.
pub struct Steps {
    bar: Option<ProgressBar>,
}

impl Steps {
    /// A bar of `total` steps, or none when no one would see it.
    pub fn new(total: u64) -> Steps {
        if !std::io::stderr().is_terminal() {
            return Steps { bar: None };
        }
        let style = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} eta {eta} {msg}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
            .with_style(style);
        Steps { bar: Some(bar) }
    }

    /// The step now running.
    pub fn start(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_string());
        }
    }

    /// One step done.
    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
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
}

impl Drop for Steps {
    fn drop(&mut self) {
        // An error or interrupt ends the run early: clear the bar so the message stands alone.
        self.finish();
    }
}
