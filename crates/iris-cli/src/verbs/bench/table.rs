//! The report's tables, as aligned text for the terminal and as Markdown for the docs:
//! throughput with Iris's ratios, latency (mean and p99), the goals, the applications.

use super::apps::AppResult;
use super::cells::Mode;
use super::goals::Goal;
use super::results::{CellResult, Measurement};
use super::targets::TargetKind;

/// A table: a header and rows of cells; an empty row separates groups.
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Aligned text: the first column left-aligned, the others right-aligned.
    pub fn text(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|i| {
                std::iter::once(&self.header)
                    .chain(&self.rows)
                    .filter_map(|r| r.get(i))
                    .map(|c| c.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i == 0 {
                    line.push_str(&format!("{cell:<w$}"));
                } else {
                    line.push_str(&format!("  {cell:>w$}"));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// A Markdown table (group separators dropped).
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        let rule: Vec<String> = (0..self.header.len())
            .map(|i| if i == 0 { ":--" } else { "--:" }.to_string())
            .collect();
        out.push_str(&line(&rule));
        for row in self.rows.iter().filter(|r| !r.is_empty()) {
            out.push_str(&line(row));
        }
        out
    }
}

/// IOPS per target and cell, with Iris over the best kernel file system and over the floor.
pub fn throughput(results: &[CellResult], kinds: &[TargetKind]) -> Table {
    let mut header = vec!["cell (IOPS)".to_string()];
    header.extend(kinds.iter().map(|k| k.name().to_string()));
    header.push("iris/kernel".into());
    header.push("iris/floor".into());
    let rows = grouped(results, |r| {
        let mut row = vec![r.cell.label()];
        row.extend(kinds.iter().map(|&k| shown(r, k, |m| iops_text(m.iops))));
        row.push(match (r.iris_over_best_kernel(), r.best_kernel()) {
            (Some(x), Some((k, _))) => format!("{} ({})", ratio_text(x), k.name()),
            _ => "-".into(),
        });
        row.push(
            r.iris_over(TargetKind::Floor)
                .map_or("-".into(), ratio_text),
        );
        row
    });
    Table { header, rows }
}

/// Mean and p99 latency per target and cell, in microseconds.
pub fn latency(results: &[CellResult], kinds: &[TargetKind]) -> Table {
    let mut header = vec!["cell (mean / p99 µs)".to_string()];
    header.extend(kinds.iter().map(|k| k.name().to_string()));
    let rows = grouped(results, |r| {
        let mut row = vec![r.cell.label()];
        row.extend(kinds.iter().map(|&k| {
            shown(r, k, |m| {
                format!("{} / {}", micros_text(m.mean_ns), micros_text(m.p99_ns))
            })
        }));
        row
    });
    Table { header, rows }
}

/// The goals: required and measured ratios.
pub fn goals(goals: &[Goal]) -> Table {
    Table {
        header: ["goal", "required", "measured", "met"]
            .map(String::from)
            .to_vec(),
        rows: goals
            .iter()
            .map(|g| {
                vec![
                    g.name.clone(),
                    format!(">= {}", ratio_text(g.required)),
                    g.measured.map_or("-".into(), ratio_text),
                    match g.met() {
                        Some(true) => "yes".into(),
                        Some(false) => "NO".into(),
                        None => "not measured".into(),
                    },
                ]
            })
            .collect(),
    }
}

/// Applications: Iris against ext4 on the same medium.
pub fn apps(results: &[AppResult]) -> Table {
    let side = |r: &Result<f64, String>| match r {
        Ok(v) => iops_text(*v),
        Err(_) => "failed".into(),
    };
    Table {
        header: [
            "application (ops/s)",
            "iris",
            "ext4",
            "tmpfs no-sync",
            "iris/ext4",
            "iris/no-sync",
        ]
        .map(String::from)
        .to_vec(),
        rows: results
            .iter()
            .map(|r| {
                vec![
                    r.name.clone(),
                    side(&r.iris),
                    side(&r.ext4),
                    side(&r.unsynced),
                    r.ratio().map_or("-".into(), ratio_text),
                    r.of_unsynced().map_or("-".into(), ratio_text),
                ]
            })
            .collect(),
    }
}

/// One row per result, an empty row between modes.
fn grouped(results: &[CellResult], row: impl Fn(&CellResult) -> Vec<String>) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut last: Option<Mode> = None;
    for r in results {
        if last.is_some_and(|m| m != r.cell.mode) {
            rows.push(Vec::new());
        }
        last = Some(r.cell.mode);
        rows.push(row(r));
    }
    rows
}

/// A target's numbers in a cell as `show` words them; "failed", or "-" when it did not run.
fn shown(r: &CellResult, kind: TargetKind, show: impl Fn(&Measurement) -> String) -> String {
    match r.by_target.get(&kind) {
        Some(Ok(m)) => show(m),
        Some(Err(_)) => "failed".into(),
        None => "-".into(),
    }
}

/// Three significant digits with k and M: "950", "46.3k", "1.32M".
pub fn iops_text(v: f64) -> String {
    let (scaled, unit) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if scaled >= 100.0 || unit.is_empty() {
        format!("{scaled:.0}{unit}")
    } else if scaled >= 10.0 {
        format!("{scaled:.1}{unit}")
    } else {
        format!("{scaled:.2}{unit}")
    }
}

/// Nanoseconds as microseconds with sensible precision: "0.57", "12.3", "104".
pub fn micros_text(ns: f64) -> String {
    let us = ns / 1e3;
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// A ratio: "0.93x", "2.1x", "31x".
pub fn ratio_text(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}x")
    } else {
        format!("{x:.0}x")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(iops_text(950.0), "950");
        assert_eq!(iops_text(46_300.0), "46.3k");
        assert_eq!(iops_text(463_183.0), "463k");
        assert_eq!(iops_text(1_322_989.0), "1.32M");
        assert_eq!(micros_text(571.9), "0.57");
        assert_eq!(micros_text(104_400.0), "104");
        assert_eq!(ratio_text(0.934), "0.93x");
        assert_eq!(ratio_text(31.2), "31x");
    }

    #[test]
    fn the_apps_table_shows_each_side_and_both_ratios() {
        let results = [
            AppResult {
                name: "redis".into(),
                detail: String::new(),
                iris: Ok(15_000.0),
                ext4: Ok(5_000.0),
                unsynced: Ok(16_000.0),
            },
            AppResult {
                name: "sqlite3".into(),
                detail: String::new(),
                iris: Ok(19_000.0),
                ext4: Ok(2_500.0),
                unsynced: Err("not among --targets".into()),
            },
        ];
        assert_eq!(
            apps(&results).markdown(),
            "| application (ops/s) | iris | ext4 | tmpfs no-sync | iris/ext4 | iris/no-sync |\n\
             | :-- | --: | --: | --: | --: | --: |\n\
             | redis | 15.0k | 5.00k | 16.0k | 3.00x | 0.94x |\n\
             | sqlite3 | 19.0k | 2.50k | failed | 7.60x | - |\n"
        );
        assert_eq!(results[0].failures(), 0);
        assert_eq!(results[1].failures(), 1);
    }

    #[test]
    fn text_tables_align_and_markdown_drops_separators() {
        let t = Table {
            header: vec!["a".into(), "bb".into()],
            rows: vec![
                vec!["long".into(), "1".into()],
                vec![],
                vec!["x".into(), "22".into()],
            ],
        };
        assert_eq!(t.text(), "a     bb\nlong   1\n\nx     22\n");
        assert_eq!(
            t.markdown(),
            "| a | bb |\n| :-- | --: |\n| long | 1 |\n| x | 22 |\n"
        );
    }
}
